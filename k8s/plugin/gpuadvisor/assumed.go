package gpuadvisor

import (
	"encoding/json"
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
	encoded json.RawMessage // the pod's JSON, encoded once at Reserve rather than in every request that carries it
	expires time.Time
}

func newAssumedPods(ttl time.Duration, now func() time.Time) *assumedPods {
	return &assumedPods{ttl: ttl, now: now, pods: map[types.UID]assumedPod{}}
}

// add keeps the pod as assumed on the node; encoded is its JSON when the cycle's call has encoded it already (nil:
// encoded here).
func (a *assumedPods) add(uid types.UID, node string, pod wirePod, encoded json.RawMessage) {
	if encoded == nil {
		var err error
		if encoded, err = json.Marshal(pod); err != nil {
			encoded = nil // a wirePod always encodes; were it not to, each request encodes it again (and fails there)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[uid] = assumedPod{node: node, pod: pod, encoded: encoded, expires: a.now().Add(a.ttl)}
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

// on returns the live assumed pods on the given nodes, in their order (dropping the expired ones), and how many are
// held in all. The assumed pods are few (the advisor's answers drop those its watch holds) and the nodes ~500: each
// node is compared with the few pods' nodes, and only past fewNodes pods are their nodes put in a map; no set of the
// candidates is built per cycle.
func (a *assumedPods) on(nodes []string) ([]assumedWire, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pods) == 0 {
		return nil, 0
	}
	now := a.now()
	live := make([]assumedWire, 0, len(a.pods))
	for uid, p := range a.pods {
		if !now.Before(p.expires) {
			delete(a.pods, uid)
			continue
		}
		live = append(live, assumedWire{Node: p.node, Pod: p.pod, encoded: p.encoded})
	}
	if len(live) == 0 {
		return nil, 0
	}
	var out []assumedWire
	if len(live) <= fewNodes {
		for _, n := range nodes {
			for i := range live {
				if live[i].Node == n {
					out = append(out, live[i])
				}
			}
		}
		return out, len(a.pods)
	}
	byNode := make(map[string][]assumedWire, len(live))
	for _, p := range live {
		byNode[p.Node] = append(byNode[p.Node], p)
	}
	for _, n := range nodes {
		if len(byNode) == 0 {
			break
		}
		if pods, ok := byNode[n]; ok {
			out = append(out, pods...)
			delete(byNode, n)
		}
	}
	return out, len(a.pods)
}

// fewNodes is how many assumed pods on looks for by comparing each candidate with each pod's node.
const fewNodes = 8

func (a *assumedPods) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pods)
}
