package gpuadvisor

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/metrics/testutil"
)

// scriptedAdvisor answers /v1/score with the given answers in turn (the last one again once they run out) and
// records each request's `since`.
type scriptedAdvisor struct {
	mu      sync.Mutex
	answers []scoreResponse
	since   []string
}

func (s *scriptedAdvisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req scoreRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	since := "<none>"
	if req.Since != nil {
		since = *req.Since
	}
	s.since = append(s.since, since)
	answer := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	_ = json.NewEncoder(w).Encode(answer)
}

func (s *scriptedAdvisor) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.since...)
}

func answerOf(token string, delta bool, scores map[string]float64) scoreResponse {
	out := scoreResponse{Token: &token, Delta: &delta, Scores: []nodeVerdict{}}
	for n, s := range scores {
		out.Scores = append(out.Scores, nodeVerdict{Node: n, Score: s, Feasible: s > 0, Known: true})
	}
	return out
}

func TestDeltaAnswersAreMergedIntoTheVerdictsHeldForThePodsShape(t *testing.T) {
	advisor := &scriptedAdvisor{answers: []scoreResponse{
		answerOf("t1", false, map[string]float64{"a": 90, "b": 45, "c": 30}),
		answerOf("t2", true, map[string]float64{"b": 10}), // a binding on b since t1
		answerOf("t3", true, map[string]float64{"d": 60}), // the window moved on to d, new to the advisor's table
	}}
	p, _ := startServer(t, advisor)
	scores, _ := scoreCycle(t, p, gpuPod("p1", oneGPU, nil), nodeInfos("a", "b", "c"))
	if got := byName(scores); got["a"] != 100 || got["b"] != 50 || got["c"] != 33 {
		t.Fatalf("full answer: %v", got)
	}
	// Another pod of the same shape (its name and UID differ): the held verdicts and the token are used.
	scores, _ = scoreCycle(t, p, gpuPod("p2", oneGPU, nil), nodeInfos("a", "b", "c"))
	if got := byName(scores); got["a"] != 100 || got["b"] != 11 || got["c"] != 33 {
		t.Fatalf("a delta merged: %v", got)
	}
	scores, _ = scoreCycle(t, p, gpuPod("p3", oneGPU, nil), nodeInfos("a", "d"))
	if got := byName(scores); got["a"] != 100 || got["d"] != 66 {
		t.Fatalf("a delta with a new node merged: %v", got)
	}
	if got, want := advisor.sent(), []string{"", "t1", "t2"}; !equal(got, want) {
		t.Fatalf("since sent %v, want %v", got, want)
	}
	// Another shape (two GPUs) holds nothing yet: it asks without a token.
	twoGPUs := v1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	scoreCycle(t, p, gpuPod("p4", twoGPUs, nil), nodeInfos("a"))
	if got := advisor.sent(); got[len(got)-1] != "" {
		t.Fatalf("another shape sent since %q", got[len(got)-1])
	}
}

func TestAnAnswerLeavingACandidateUncoveredIsNeutralAndDropsWhatIsHeld(t *testing.T) {
	advisor := &scriptedAdvisor{answers: []scoreResponse{
		answerOf("t1", false, map[string]float64{"a": 90, "b": 45}),
		answerOf("t2", true, map[string]float64{"b": 10}), // says nothing of c, which the plugin never held
		answerOf("t3", false, map[string]float64{"a": 90, "b": 10, "c": 20}),
	}}
	p, _ := startServer(t, advisor)
	scoreCycle(t, p, gpuPod("p1", oneGPU, nil), nodeInfos("a", "b"))
	before := testutilCounter(t, "uncovered")
	scores, status := scoreCycle(t, p, gpuPod("p2", oneGPU, nil), nodeInfos("a", "b", "c"))
	if !neutral(scores, status) {
		t.Fatalf("an uncovered candidate must leave the cycle neutral, got %v", byName(scores))
	}
	if testutilCounter(t, "uncovered") != before+1 {
		t.Fatal("the uncovered answer is not counted")
	}
	scores, _ = scoreCycle(t, p, gpuPod("p3", oneGPU, nil), nodeInfos("a", "b", "c"))
	if got := byName(scores); got["a"] != 100 || got["c"] != 22 {
		t.Fatalf("the full answer after: %v", got)
	}
	if got, want := advisor.sent(), []string{"", "t1", ""}; !equal(got, want) {
		t.Fatalf("since sent %v, want %v (the held verdicts dropped)", got, want)
	}
}

func TestAnAdvisorWithoutDeltaAnswersIsAskedInFullEveryTime(t *testing.T) {
	f := &fakeAdvisor{scores: map[string]float64{"a": 80, "b": 40}}
	p, _ := start(t, f, nil)
	for _, name := range []string{"p1", "p2"} {
		scores, _ := scoreCycle(t, p, gpuPod(name, oneGPU, nil), nodeInfos("a", "b"))
		if got := byName(scores); got["a"] != 100 || got["b"] != 50 {
			t.Fatalf("%s: %v", name, got)
		}
		if since := f.lastRequest(t).Since; since == nil || *since != "" {
			t.Fatalf("%s: since %v, want \"\" (nothing held)", name, since)
		}
	}
	if p.held.len() != 0 {
		t.Fatal("an answer without a token must not be held")
	}
}

func TestHeldShapesAreBoundedLeastRecentlyUsedFirst(t *testing.T) {
	h := newHeldAnswers(2)
	for k := uint64(1); k <= 3; k++ {
		h.give(&heldShape{key: k, token: "t", verdicts: map[string]verdict{}})
	}
	if h.len() != 2 || h.take(1) != nil || h.take(2) == nil || h.take(3) == nil {
		t.Fatal("the least recently given shape must go first, and at most 2 be held")
	}
}

func TestTheShapeKeyIgnoresThePodsNameAndUIDOnly(t *testing.T) {
	a, b := toWire(gpuPod("a", oneGPU, nil)), toWire(gpuPod("b", oneGPU, nil))
	if shapeKey(a) != shapeKey(b) {
		t.Fatal("pods differing only in name and UID must share a shape")
	}
	c := toWire(gpuPod("a", v1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}, nil))
	if shapeKey(a) == shapeKey(c) {
		t.Fatal("pods asking for other GPUs must not share a shape")
	}
}

func startServer(t *testing.T, h http.Handler) (*Plugin, *clock) {
	t.Helper()
	return startHandler(t, h, nil)
}

func testutilCounter(t *testing.T, kind string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(answers.WithLabelValues(kind))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// olderAdvisor is an advisor from before delta answers: its strict schema refuses a request with a field it does
// not know (`since`) with a 422, as pydantic's extra="forbid" does; otherwise it answers every candidate in full.
type olderAdvisor struct {
	mu       sync.Mutex
	scores   map[string]float64
	refused  int
	answered int
}

func (o *olderAdvisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var fields map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&fields); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := fields["since"]; ok {
		o.refused++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"detail":[{"type":"extra_forbidden","loc":["body","since"],"msg":"Extra inputs are not permitted"}]}`)
		return
	}
	o.answered++
	out := scoreResponse{Scores: []nodeVerdict{}, AssumedHeld: []string{}}
	for n, s := range o.scores {
		out.Scores = append(out.Scores, nodeVerdict{Node: n, Score: s, Feasible: true, Known: true})
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (o *olderAdvisor) counts() (refused, answered int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refused, o.answered
}

func TestAnAdvisorRefusingSinceIsAskedAgainWithoutItAndNotSentItForAWhile(t *testing.T) {
	older := &olderAdvisor{scores: map[string]float64{"a": 80, "b": 40}}
	p, c := startServer(t, older)
	errorsBefore := fallbackCount(t, "error")
	scores, status := scoreCycle(t, p, gpuPod("p1", oneGPU, nil), nodeInfos("a", "b"))
	if neutral(scores, status) {
		t.Fatal("the cycle whose request was refused for since must still get the advisor's scores")
	}
	if got := byName(scores); got["a"] != 100 || got["b"] != 50 {
		t.Fatalf("scores %v", got)
	}
	if refused, answered := older.counts(); refused != 1 || answered != 1 {
		t.Fatalf("refused %d, answered %d: want the request sent again without since in the same cycle", refused, answered)
	}
	if fallbackCount(t, "error") != errorsBefore {
		t.Fatal("a refused since is not a failed call")
	}
	// The next cycles, within sinceRetry, send no since at all: one request each.
	c.t = c.t.Add(sinceRetry - time.Second)
	scores, _ = scoreCycle(t, p, gpuPod("p2", oneGPU, nil), nodeInfos("a", "b"))
	if got := byName(scores); got["a"] != 100 || got["b"] != 50 {
		t.Fatalf("scores %v", got)
	}
	if refused, answered := older.counts(); refused != 1 || answered != 2 {
		t.Fatalf("refused %d, answered %d: since must not be sent again before sinceRetry", refused, answered)
	}
	// Once sinceRetry has passed the plugin tries since again (an upgraded advisor would answer deltas).
	c.t = c.t.Add(2 * time.Second)
	scores, _ = scoreCycle(t, p, gpuPod("p3", oneGPU, nil), nodeInfos("a", "b"))
	if got := byName(scores); got["a"] != 100 || got["b"] != 50 {
		t.Fatalf("scores %v", got)
	}
	if refused, answered := older.counts(); refused != 2 || answered != 3 {
		t.Fatalf("refused %d, answered %d: since must be tried again after sinceRetry", refused, answered)
	}
	if p.breaker.failures != 0 {
		t.Fatal("a refused since must not count against the advisor")
	}
}

func TestAnotherRefusalIsAFailedCallNotARetry(t *testing.T) {
	// An advisor that refuses the request with 422 whatever it carries: resent once without since, then the cycle
	// is neutral like any failed call.
	refusals := 0
	var mu sync.Mutex
	p, _ := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		refusals++
		mu.Unlock()
		http.Error(w, `{"detail":"pod: bad"}`, http.StatusUnprocessableEntity)
	}))
	scores, status := scoreCycle(t, p, gpuPod("p1", oneGPU, nil), nodeInfos("a", "b"))
	if !neutral(scores, status) {
		t.Fatalf("a refused request must leave the cycle neutral, got %v", byName(scores))
	}
	mu.Lock()
	defer mu.Unlock()
	if refusals != 2 {
		t.Fatalf("%d requests, want 2 (with since, then without)", refusals)
	}
}

func fallbackCount(t *testing.T, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(fallbacks.WithLabelValues(reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestThePodEncodedOnceIsThePodAsJSONEncodesIt(t *testing.T) {
	pods := []*v1.Pod{gpuPod("p1", oneGPU, map[string]string{"a": "b"}), gpuPod(`odd "name"`, oneGPU, nil)}
	pods[1].UID = ""
	for _, pod := range pods {
		wire := toWire(pod)
		encoded, key := encodePod(wire)
		if encoded == nil || key == 0 {
			t.Fatalf("%s: not encoded", pod.Name)
		}
		plain, err := json.Marshal(wire)
		if err != nil {
			t.Fatal(err)
		}
		var got, want map[string]any
		if err := json.Unmarshal(encoded, &got); err != nil {
			t.Fatalf("%s: %v in %s", pod.Name, err, encoded)
		}
		_ = json.Unmarshal(plain, &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: encoded %s, want %s", pod.Name, encoded, plain)
		}
	}
	// A request with the pod and the assumed pods encoded before sends the same JSON as one encoded whole.
	wire := toWire(pods[0])
	encoded, _ := encodePod(wire)
	assumedJSON, _ := json.Marshal(toWire(pods[1]))
	req := scoreRequest{Pod: wire, Nodes: []string{"a"}, UnknownNodes: "neutral", encodedPod: encoded,
		Assumed: []assumedWire{{Node: "a", Pod: toWire(pods[1]), encoded: assumedJSON}}}
	fast, err := appendRequest(nil, &req)
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := json.Marshal(req)
	var got, want map[string]any
	_ = json.Unmarshal(fast, &got)
	_ = json.Unmarshal(slow, &want)
	if !reflect.DeepEqual(got, want) || got["pod"] == nil {
		t.Fatalf("request %s, want %s", fast, slow)
	}
}

func TestTheRequestWrittenByHandIsTheJSONEncodingJSONWrites(t *testing.T) {
	pod := toWire(gpuPod("p", oneGPU, map[string]string{"gpuadvisor.io/gpu-milli": "500"}))
	empty, token := "", "tok/+=="
	odd := []string{"node-1", `say "hi"`, `back\slash`, "tab\there", "<a&b>", "ünïcode", "bad\xffutf8", "ctl\x01", ""}
	requests := map[string]scoreRequest{
		"plain":        {Pod: pod, Nodes: []string{"a", "b"}, UnknownNodes: "neutral", Detail: "brief"},
		"odd names":    {Pod: pod, Nodes: odd, UnknownNodes: "neutral", Since: &token},
		"no nodes":     {Pod: pod, UnknownNodes: "neutral"},
		"empty nodes":  {Pod: pod, Nodes: []string{}, UnknownNodes: "", Since: &empty},
		"assumed":      {Pod: pod, Nodes: []string{"a"}, Assumed: []assumedWire{{Node: "a", Pod: pod}, {Node: `"q"`, Pod: pod}}},
		"assumed none": {Pod: pod, Nodes: []string{"a"}, Assumed: []assumedWire{}},
	}
	for name, req := range requests {
		got, err := appendRequest([]byte("prefix"), &req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, _ := json.Marshal(req)
		if string(got) != "prefix"+string(want) {
			t.Errorf("%s: wrote\n%s\nwant\n%s", name, got[len("prefix"):], want)
		}
	}
}

func TestHeldVerdictsAreKeyedByTheCandidatesOwnNames(t *testing.T) {
	advisor := &scriptedAdvisor{answers: []scoreResponse{answerOf("t1", false, map[string]float64{"a": 90, "b": 45, "z": 30})}}
	p, _ := startServer(t, advisor)
	pod, nodes := gpuPod("p1", oneGPU, nil), nodeInfos("a", "b")
	scoreCycle(t, p, pod, nodes)
	_, key := encodePod(toWire(pod))
	held := p.held.take(key)
	if held == nil {
		t.Fatal("nothing held after a full answer with a token")
	}
	// Written again under the candidates' names (the answer's copies are kept only for nodes not yet a candidate).
	for name, wantMerged := range map[string]bool{"a": false, "b": false, "z": true} {
		if got := held.verdicts[name].merged; got != wantMerged {
			t.Errorf("%s: merged = %v, want %v", name, got, wantMerged)
		}
	}
}
