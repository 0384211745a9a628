package gpuadvisor

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// assumedPods are the GPU pods this scheduler has reserved on a node (Reserve) and not released (Unreserve), for
// `ttl`: until the advisor's pod watch has seen them bound. Each score request carries those on its candidate nodes,
// so a burst of pods scored before the first binding reaches the advisor does not pick the same free GPU twice. The
// advisor counts an assumed pod once when its watch already knows it (`ClusterState.with_assumed`), and says so in
// its answer (`assumed_held`): such a pod is forgotten here, so that the list sent stays the few pods placed since
// the advisor last caught up, not every pod of the last assumeTTL.
type assumedPods struct {
	mu   sync.Mutex
	ttl  time.Duration
	now  func() time.Time
	pods map[types.UID]assumedPod
}

type assumedPod struct {
	node    string
	pod     wirePod
	expires time.Time
}

func newAssumedPods(ttl time.Duration, now func() time.Time) *assumedPods {
	return &assumedPods{ttl: ttl, now: now, pods: map[types.UID]assumedPod{}}
}

func (a *assumedPods) add(uid types.UID, node string, pod wirePod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[uid] = assumedPod{node: node, pod: pod, expires: a.now().Add(a.ttl)}
}

// forget drops the pods the advisor holds already (keys namespace/name).
func (a *assumedPods) forget(keys []string) {
	if len(keys) == 0 {
		return
	}
	held := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		held[k] = struct{}{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, p := range a.pods {
		if _, ok := held[p.pod.Metadata.Namespace+"/"+p.pod.Metadata.Name]; ok {
			delete(a.pods, uid)
		}
	}
}

func (a *assumedPods) remove(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pods, uid)
}

// on returns the live assumed pods on the given nodes (dropping the expired ones) and how many are held in all.
func (a *assumedPods) on(nodes map[string]struct{}) ([]assumedWire, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	var out []assumedWire
	for uid, p := range a.pods {
		if !now.Before(p.expires) {
			delete(a.pods, uid)
			continue
		}
		if _, ok := nodes[p.node]; ok {
			out = append(out, assumedWire{Node: p.node, Pod: p.pod})
		}
	}
	return out, len(a.pods)
}

func (a *assumedPods) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pods)
}
