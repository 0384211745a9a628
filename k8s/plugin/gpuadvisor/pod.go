package gpuadvisor

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// gpuResourceNames are the resource names a GPU pod carries, whole or shared. The same list as the advisor's
// GPU_RESOURCE_NAMES (advisor/cluster/pods.py) and the extender profile's managedResources; a Python test keeps
// the three equal.
var gpuResourceNames = []v1.ResourceName{
	"nvidia.com/gpu",
	"nvidia.com/gpumem",
	"nvidia.com/gpumem-percentage",
	"nvidia.com/gpucores",
	"aliyun.com/gpu-mem",
	"volcano.sh/vgpu-number",
	"volcano.sh/vgpu-memory",
	"volcano.sh/vgpu-cores",
	"gpuadvisor.io/gpu-milli",
}

// migResourcePrefix names the NVIDIA device plugin's mixed-strategy MIG resources (`nvidia.com/mig-1g.10gb`): the
// advisor places such a pod on a free instance of its profile (advisor/placement/mig.py).
const migResourcePrefix = "nvidia.com/mig-"

// gpuAnnotations ask for a GPU share without a resource (the advisor's GPU_MILLI_ANNOTATION and
// GPU_MEMORY_ANNOTATION).
var gpuAnnotations = []string{"gpuadvisor.io/gpu-milli", "gpuadvisor.io/gpu-memory-bytes"}

// wantsGPU says whether the pod asks for a GPU at all: only those pods cost a call to the advisor. How much it asks
// for is the advisor's to read (one definition, advisor/cluster/pods.py); a pod that names a GPU resource with 0 is
// still sent, and scored neutrally there. A pod with ResourceClaims (Dynamic Resource Allocation) is sent too: the
// advisor reads their device classes and selectors (advisor/cluster/dra.py) and scores a claim for no GPU neutrally.
func wantsGPU(pod *v1.Pod) bool {
	if len(pod.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, a := range gpuAnnotations {
		if _, ok := pod.Annotations[a]; ok {
			return true
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			r := &list[i].Resources
			for _, name := range gpuResourceNames {
				if _, ok := r.Limits[name]; ok {
					return true
				}
				if _, ok := r.Requests[name]; ok {
					return true
				}
			}
			for _, list := range []v1.ResourceList{r.Limits, r.Requests} {
				for name := range list {
					if strings.HasPrefix(string(name), migResourcePrefix) {
						return true
					}
				}
			}
		}
	}
	return false
}

// wirePod is the part of a v1.Pod the advisor reads (its PodQuery with `metadata` and `spec`): sending the whole
// object would send managedFields, status and volumes on every cycle for nothing.
type wirePod struct {
	Metadata wireMeta `json:"metadata"`
	Spec     wireSpec `json:"spec"`
}

type wireMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	UID         string            `json:"uid,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type wireSpec struct {
	Containers     []wireContainer       `json:"containers"`
	InitContainers []wireContainer       `json:"initContainers,omitempty"`
	NodeSelector   map[string]string     `json:"nodeSelector,omitempty"`
	Affinity       *v1.Affinity          `json:"affinity,omitempty"`
	Overhead       v1.ResourceList       `json:"overhead,omitempty"`
	Priority       *int32                `json:"priority,omitempty"`
	SchedulerName  string                `json:"schedulerName,omitempty"`
	ResourceClaims []v1.PodResourceClaim `json:"resourceClaims,omitempty"`
}

type wireContainer struct {
	Name          string                     `json:"name"`
	Resources     v1.ResourceRequirements    `json:"resources"`
	RestartPolicy *v1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
}

func toWire(pod *v1.Pod) wirePod {
	containers := func(list []v1.Container) []wireContainer {
		out := make([]wireContainer, len(list))
		for i := range list {
			out[i] = wireContainer{Name: list[i].Name, Resources: list[i].Resources, RestartPolicy: list[i].RestartPolicy}
		}
		return out
	}
	w := wirePod{
		Metadata: wireMeta{
			Name:        pod.Name,
			Namespace:   pod.Namespace,
			UID:         string(pod.UID),
			Labels:      pod.Labels,
			Annotations: advisorAnnotations(pod.Annotations),
		},
		Spec: wireSpec{
			Containers:     containers(pod.Spec.Containers),
			NodeSelector:   pod.Spec.NodeSelector,
			Affinity:       pod.Spec.Affinity,
			Overhead:       pod.Spec.Overhead,
			Priority:       pod.Spec.Priority,
			SchedulerName:  pod.Spec.SchedulerName,
			ResourceClaims: pod.Spec.ResourceClaims,
		},
	}
	if len(pod.Spec.InitContainers) > 0 {
		w.Spec.InitContainers = containers(pod.Spec.InitContainers)
	}
	return w
}

// lastApplied is kubectl's copy of the whole manifest: often the largest annotation, never read by the advisor.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func advisorAnnotations(in map[string]string) map[string]string {
	if _, ok := in[lastApplied]; !ok {
		return in
	}
	out := make(map[string]string, len(in)-1)
	for k, v := range in {
		if k != lastApplied {
			out[k] = v
		}
	}
	return out
}
