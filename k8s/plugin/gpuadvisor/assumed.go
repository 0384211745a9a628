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
//
// A burst keeps a few dozen pods here while the advisor's watch catches up, and every cycle asks which of them are
// on its ~500 candidates: the pods are held by pointer and indexed by node as they come and go, so that a cycle
// copies none of them and builds no index of its own (it did: ~7 kB a cycle in a burst at 5,000 nodes).
type assumedPods struct {
	mu     sync.Mutex
	ttl    time.Duration
	now    func() time.Time
	pods   map[types.UID]*assumedPod
	byNode map[string][]*assumedPod
}

type assumedPod struct {
	uid     types.UID
	node    string
	key     string // namespace/name, as the advisor's `assumed_held` names it
	pod     wirePod
	encoded json.RawMessage // the pod's JSON, encoded once at Reserve rather than in every request that carries it
	expires time.Time
}

func newAssumedPods(ttl time.Duration, now func() time.Time) *assumedPods {
	return &assumedPods{ttl: ttl, now: now, pods: map[types.UID]*assumedPod{}, byNode: map[string][]*assumedPod{}}
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
	p := &assumedPod{
		uid: uid, node: node, key: pod.Metadata.Namespace + "/" + pod.Metadata.Name,
		pod: pod, encoded: encoded, expires: a.now().Add(a.ttl),
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drop(uid)
	a.pods[uid] = p
	a.byNode[node] = append(a.byNode[node], p)
}

// drop removes the pod from both maps (the caller holds mu).
func (a *assumedPods) drop(uid types.UID) {
	p, ok := a.pods[uid]
	if !ok {
		return
	}
	delete(a.pods, uid)
	on := a.byNode[p.node]
	for i, q := range on {
		if q == p {
			on = append(on[:i], on[i+1:]...)
			break
		}
	}
	if len(on) == 0 {
		delete(a.byNode, p.node)
	} else {
		a.byNode[p.node] = on
	}
}

// forget drops the pods the advisor holds already (keys namespace/name).
func (a *assumedPods) forget(keys []string) {
	if len(keys) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var held map[string]struct{}
	if len(keys) > fewNodes {
		held = make(map[string]struct{}, len(keys))
		for _, k := range keys {
			held[k] = struct{}{}
		}
	}
	for uid, p := range a.pods {
		if held != nil {
			if _, ok := held[p.key]; ok {
				a.drop(uid)
			}
			continue
		}
		for _, k := range keys {
			if k == p.key {
				a.drop(uid)
				break
			}
		}
	}
}

func (a *assumedPods) remove(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drop(uid)
}

// on returns the live assumed pods on the given nodes, in their order (dropping the expired ones), and how many are
// held in all. With at most fewNodes pods each candidate is compared with their nodes; with more, the candidates are
// looked up in the index by node.
func (a *assumedPods) on(nodes []string) ([]assumedWire, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pods) == 0 {
		return nil, 0
	}
	now := a.now()
	var few [fewNodes]*assumedPod
	n := 0
	for uid, p := range a.pods {
		if !now.Before(p.expires) {
			a.drop(uid)
			continue
		}
		if n < fewNodes {
			few[n] = p
		}
		n++
	}
	if len(a.pods) == 0 {
		return nil, 0
	}
	var out []assumedWire
	if len(a.pods) <= fewNodes {
		for _, node := range nodes {
			for _, p := range few[:len(a.pods)] {
				if p.node == node {
					out = append(out, p.wire())
				}
			}
		}
		return out, len(a.pods)
	}
	found := 0
	for _, node := range nodes {
		for _, p := range a.byNode[node] {
			out = append(out, p.wire())
			found++
		}
		if found == len(a.pods) {
			break
		}
	}
	return out, len(a.pods)
}

func (p *assumedPod) wire() assumedWire {
	return assumedWire{Node: p.node, Pod: p.pod, encoded: p.encoded}
}

// fewNodes is how many assumed pods on looks for by comparing each candidate with each pod's node.
const fewNodes = 8

func (a *assumedPods) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pods)
}
