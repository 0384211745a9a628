package gpuadvisor

import (
	"bytes"
	"container/list"
	"encoding/json"
	"hash/fnv"
	"sync"
	"time"
)

// maxHeldShapes bounds the pod shapes whose verdicts the plugin keeps (least recently used dropped): a burst is one
// or a few shapes, each held for at most every node of the cluster.
const maxHeldShapes = 64

// heldAnswers are the advisor's verdicts the plugin holds per pod shape, with the token that names them at the
// advisor (`/v1/score`'s `since`): consecutive cycles of a burst ask about pods of one shape, and the advisor then
// answers only the entries that changed since (a delta), which are merged here. The key is a hash of the pod as
// sent without its name and UID: a guess at the advisor's shape, which it checks (a wrong guess costs a full
// answer, never a wrong score).
//
// A call takes its shape's verdicts out (`take`) and gives them back merged (`give`), so that a call still running
// when the next cycle starts (its cycle ended first) never shares a map with it: that cycle finds nothing and asks
// for a full answer.
type heldAnswers struct {
	mu     sync.Mutex
	limit  int
	order  *list.List // front: most recently given back; values are *heldShape
	shapes map[uint64]*list.Element
}

type heldShape struct {
	key      uint64
	token    string
	verdicts map[string]verdict
}

func newHeldAnswers(limit int) *heldAnswers {
	return &heldAnswers{limit: limit, order: list.New(), shapes: map[uint64]*list.Element{}}
}

// shapeKey hashes the pod as sent, without what names this one pod.
func shapeKey(pod wirePod) uint64 {
	_, key := encodePod(pod)
	return key
}

// shapePrefix begins every pod encoded without its name: Name is wireMeta's first field, never omitted, and
// Namespace (never omitted either) follows it.
const shapePrefix = `{"metadata":{"name":"",`

// encodePod is the pod's JSON as sent and its shape key from one encoding: the pod is encoded without its name and
// UID (its shape, which is hashed), and the name and UID are then written at the front of its metadata (the advisor
// reads a JSON object: the order of its fields does not matter). Nil JSON (the caller encodes the pod itself) and
// key 0 (no shape shared) if it does not encode, which a wirePod always does.
func encodePod(pod wirePod) (json.RawMessage, uint64) {
	name, uid := pod.Metadata.Name, pod.Metadata.UID
	pod.Metadata.Name, pod.Metadata.UID = "", ""
	shape, err := json.Marshal(pod)
	if err != nil || !bytes.HasPrefix(shape, []byte(shapePrefix)) {
		return nil, 0
	}
	h := fnv.New64a()
	_, _ = h.Write(shape)
	out := make([]byte, 0, len(shape)+len(name)+len(uid)+16)
	out = append(out, `{"metadata":{"name":`...)
	out = appendString(out, name)
	if uid != "" {
		out = append(out, `,"uid":`...)
		out = appendString(out, uid)
	}
	out = append(out, ',')
	out = append(out, shape[len(shapePrefix):]...)
	return out, h.Sum64()
}

// take removes and returns the shape's held verdicts (nil when none are held).
func (h *heldAnswers) take(key uint64) *heldShape {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.shapes[key]
	if !ok {
		return nil
	}
	h.order.Remove(e)
	delete(h.shapes, key)
	return e.Value.(*heldShape)
}

// give keeps a shape's verdicts (replacing any held meanwhile), dropping the least recently used beyond the limit.
func (h *heldAnswers) give(s *heldShape) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.shapes[s.key]; ok {
		h.order.Remove(e)
	}
	h.shapes[s.key] = h.order.PushFront(s)
	for h.order.Len() > h.limit {
		last := h.order.Back()
		h.order.Remove(last)
		delete(h.shapes, last.Value.(*heldShape).key)
	}
}

func (h *heldAnswers) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.order.Len()
}

// sinceRetry is how long the plugin stops sending `since` to an advisor that refused it with a 422 (one older than
// delta answers: its strict schema refuses the unknown field). Then it tries again, so that an advisor upgraded
// meanwhile gives delta answers again; each try costs one refused request.
const sinceRetry = 10 * time.Minute

// sinceGate says whether requests carry `since` now.
type sinceGate struct {
	mu       sync.Mutex
	now      func() time.Time
	offUntil time.Time
}

func (g *sinceGate) on() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.now().Before(g.offUntil)
}

// refused turns `since` off for sinceRetry; it says whether it was on (so that the change is logged once).
func (g *sinceGate) refused() (wasOn bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	wasOn = !now.Before(g.offUntil)
	g.offUntil = now.Add(sinceRetry)
	return wasOn
}
