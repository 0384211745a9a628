package gpuadvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// fakeAdvisor answers /v1/score with fixed scores per node and records every request.
type fakeAdvisor struct {
	mu     sync.Mutex
	scores map[string]float64
	// never are the nodes that can never host the pod, with why; a node scoring 0 otherwise lacks room now.
	never    map[string]string
	held     []string
	requests []scoreRequest
	delay    time.Duration
	status   int
	calls    atomic.Int64
	// gate, when set, holds every answer until it is closed.
	gate chan struct{}
}

func (f *fakeAdvisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	if r.URL.Path != scorePath || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req scoreRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	delay, status, held, gate := f.delay, f.status, f.held, f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	time.Sleep(delay)
	if status != 0 {
		http.Error(w, `{"detail":"down"}`, status)
		return
	}
	out := scoreResponse{AssumedHeld: held}
	for _, n := range req.Nodes {
		s, known := f.scores[n]
		if !known {
			s = 50
		}
		v := nodeVerdict{Node: n, Score: s, Feasible: s > 0, Known: known}
		if known && s == 0 {
			v.Reason, v.Unresolvable = "no free GPU now", false
			if why, ok := f.never[n]; ok {
				v.Reason, v.Unresolvable = why, true
			}
		}
		out.Scores = append(out.Scores, v)
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (f *fakeAdvisor) lastRequest(t *testing.T) scoreRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the advisor was never asked")
	}
	return f.requests[len(f.requests)-1]
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func start(t *testing.T, f *fakeAdvisor, mutate func(*Args)) (*Plugin, *clock) {
	t.Helper()
	return startHandler(t, f, mutate)
}

func startHandler(t testing.TB, h http.Handler, mutate func(*Args)) (*Plugin, *clock) {
	t.Helper()
	server := httptest.NewServer(h)
	t.Cleanup(server.Close)
	args := &Args{AdvisorURL: server.URL}
	if mutate != nil {
		mutate(args)
	}
	SetDefaults(args)
	if err := Validate(args); err != nil {
		t.Fatal(err)
	}
	registerMetrics()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	return newPlugin(args, "", c.now), c
}

func gpuPod(name string, resources v1.ResourceList, annotations map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ml", UID: types.UID("uid-" + name), Annotations: annotations,
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "main", Resources: v1.ResourceRequirements{Limits: resources},
		}}},
	}
}

func nodeInfos(names ...string) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, len(names))
	for i, n := range names {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		out[i] = ni
	}
	return out
}

// scoreEach runs the plugin's Score for every node, as the framework does between PreScore and NormalizeScore.
func scoreEach(t *testing.T, ctx context.Context, p *Plugin, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) fwk.NodeScoreList {
	t.Helper()
	scores := make(fwk.NodeScoreList, len(nodes))
	for i, n := range nodes {
		s, st := p.Score(ctx, state, pod, n)
		if !st.IsSuccess() {
			t.Fatalf("Score(%s): %v", n.Node().Name, st)
		}
		scores[i] = fwk.NodeScore{Name: n.Node().Name, Score: s}
	}
	return scores
}

// scoreCycle runs PreScore, Score per node and NormalizeScore as the framework does; nil scores when skipped.
func scoreCycle(t *testing.T, p *Plugin, pod *v1.Pod, nodes []fwk.NodeInfo) (fwk.NodeScoreList, *fwk.Status) {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	status := p.PreScore(ctx, state, pod, nodes)
	if status.IsSkip() {
		return nil, status
	}
	if !status.IsSuccess() {
		t.Fatalf("PreScore: %v", status)
	}
	scores := scoreEach(t, ctx, p, state, pod, nodes)
	if st := p.ScoreExtensions().NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", st)
	}
	return scores, status
}

// neutral says whether a cycle's outcome leaves the advisor no say: the plugin skipped, or every node the same score.
func neutral(scores fwk.NodeScoreList, status *fwk.Status) bool {
	if status.IsSkip() {
		return true
	}
	for _, s := range scores {
		if s.Score != scores[0].Score {
			return false
		}
	}
	return true
}

func byName(scores fwk.NodeScoreList) map[string]int64 {
	out := map[string]int64{}
	for _, s := range scores {
		out[s.Name] = s.Score
	}
	return out
}

var oneGPU = v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}

func TestOneCallPerCycleAndScoresFollowTheAdvisor(t *testing.T) {
	f := &fakeAdvisor{scores: map[string]float64{"a": 20, "b": 80, "c": 0}}
	p, _ := start(t, f, nil)
	scores, _ := scoreCycle(t, p, gpuPod("p", oneGPU, nil), nodeInfos("a", "b", "c", "d"))
	if got := f.calls.Load(); got != 1 {
		t.Fatalf("%d calls to the advisor for one cycle, want 1", got)
	}
	got := byName(scores)
	want := map[string]int64{"a": 25, "b": 100, "c": 0, "d": 62} // stretched so that the best is 100; d unknown: 50
	for n, w := range want {
		if got[n] != w {
			t.Errorf("score of %s = %d, want %d (all: %v)", n, got[n], w, got)
		}
	}
	req := f.lastRequest(t)
	if strings.Join(req.Nodes, ",") != "a,b,c,d" || req.UnknownNodes != "neutral" {
		t.Errorf("request nodes %v unknown_nodes %q", req.Nodes, req.UnknownNodes)
	}
	if req.Detail != "brief" {
		t.Errorf("request detail %q, want the brief answer", req.Detail)
	}
	if req.Pod.Metadata.Name != "p" || req.Pod.Metadata.Namespace != "ml" {
		t.Errorf("request pod %+v", req.Pod.Metadata)
	}
}

func TestPodsWithoutAGPUCostNoCall(t *testing.T) {
	f := &fakeAdvisor{}
	p, _ := start(t, f, nil)
	cpuOnly := gpuPod("web", v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}, nil)
	if _, st := scoreCycle(t, p, cpuOnly, nodeInfos("a")); !st.IsSkip() {
		t.Errorf("a CPU pod got %v, want Skip", st)
	}
	if f.calls.Load() != 0 {
		t.Errorf("a CPU pod cost %d calls", f.calls.Load())
	}
}

func TestEveryGPUSpellingIsScored(t *testing.T) {
	pods := []*v1.Pod{
		gpuPod("hami", v1.ResourceList{"nvidia.com/gpumem": resource.MustParse("4000")}, nil),
		gpuPod("gpushare", v1.ResourceList{"aliyun.com/gpu-mem": resource.MustParse("8")}, nil),
		gpuPod("vgpu", v1.ResourceList{"volcano.sh/vgpu-number": resource.MustParse("1")}, nil),
		gpuPod("milli-resource", v1.ResourceList{"gpuadvisor.io/gpu-milli": resource.MustParse("300")}, nil),
		gpuPod("milli-annotation", nil, map[string]string{"gpuadvisor.io/gpu-milli": "300"}),
		gpuPod("mig", v1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}, nil),
	}
	for _, pod := range pods {
		f := &fakeAdvisor{}
		p, _ := start(t, f, nil)
		if _, st := scoreCycle(t, p, pod, nodeInfos("a")); st.IsSkip() || f.calls.Load() != 1 {
			t.Errorf("pod %s: status %v, %d calls; want it scored", pod.Name, st, f.calls.Load())
		}
	}
}

func TestSlowAdvisorScoresNeutrallyThenTheBreakerOpens(t *testing.T) {
	f := &fakeAdvisor{delay: 200 * time.Millisecond}
	p, c := start(t, f, func(a *Args) {
		a.Timeout = metav1.Duration{Duration: 20 * time.Millisecond}
		a.FailureThreshold = 2
		a.OpenDuration = metav1.Duration{Duration: 10 * time.Second}
	})
	before, _ := testutil.GetCounterMetricValue(fallbacks.WithLabelValues("circuit_open"))
	pod := gpuPod("p", oneGPU, nil)
	for i := range 2 {
		if scores, st := scoreCycle(t, p, pod, nodeInfos("a", "b")); !neutral(scores, st) {
			t.Fatalf("cycle %d with a slow advisor: %v %v, want neutral scores", i, st, scores)
		}
	}
	if got := f.calls.Load(); got != 2 {
		t.Fatalf("%d calls, want 2", got)
	}
	if _, st := scoreCycle(t, p, pod, nodeInfos("a", "b")); !st.IsSkip() || f.calls.Load() != 2 {
		t.Fatalf("open breaker: status %v, %d calls; want Skip without a call", st, f.calls.Load())
	}
	after, _ := testutil.GetCounterMetricValue(fallbacks.WithLabelValues("circuit_open"))
	if after-before != 1 {
		t.Errorf("circuit_open fallbacks grew by %v, want 1", after-before)
	}
	// The advisor recovers: after the open duration one trial call goes through and closes the breaker.
	f.mu.Lock()
	f.delay = 0
	f.scores = map[string]float64{"a": 90, "b": 10}
	f.mu.Unlock()
	c.t = c.t.Add(11 * time.Second)
	scores, st := scoreCycle(t, p, pod, nodeInfos("a", "b"))
	if st.IsSkip() || byName(scores)["a"] != 100 {
		t.Fatalf("after recovery: status %v scores %v", st, scores)
	}
}

func TestAdvisorErrorsAreNeverAFailedCycle(t *testing.T) {
	f := &fakeAdvisor{status: http.StatusInternalServerError}
	p, _ := start(t, f, nil)
	if scores, st := scoreCycle(t, p, gpuPod("p", oneGPU, nil), nodeInfos("a", "b")); !neutral(scores, st) {
		t.Errorf("advisor 500: %v %v, want neutral scores", st, scores)
	}
	down, _ := start(t, &fakeAdvisor{}, func(a *Args) { a.AdvisorURL = "http://127.0.0.1:1" })
	if scores, st := scoreCycle(t, down, gpuPod("p", oneGPU, nil), nodeInfos("a", "b")); !neutral(scores, st) {
		t.Errorf("advisor down: %v %v, want neutral scores", st, scores)
	}
}

func TestScoreDoesNotWaitForTheAdvisorNormalizeScoreWritesItsAnswer(t *testing.T) {
	gate := make(chan struct{})
	f := &fakeAdvisor{scores: map[string]float64{"a": 40, "b": 80}, gate: gate}
	p, _ := start(t, f, nil)
	ctx := context.Background()
	state := framework.NewCycleState()
	pod, nodes := gpuPod("p", oneGPU, nil), nodeInfos("a", "b")
	if st := p.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	// The advisor has not answered (gate closed below): PreScore and Score must not have waited for it.
	scores := scoreEach(t, ctx, p, state, pod, nodes)
	close(gate)
	if st := p.NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", st)
	}
	if got := byName(scores); got["a"] != 50 || got["b"] != 100 {
		t.Errorf("scores %v, want the advisor's 40 and 80 stretched to 50 and 100", got)
	}
}

func TestACycleCutShortDoesNotCountAgainstTheAdvisor(t *testing.T) {
	gate := make(chan struct{})
	f := &fakeAdvisor{scores: map[string]float64{"a": 40}, gate: gate}
	p, _ := start(t, f, func(a *Args) { a.FailureThreshold = 1 })
	defer close(gate)
	ctx, cancel := context.WithCancel(context.Background())
	state := framework.NewCycleState()
	pod := gpuPod("p", oneGPU, nil)
	if st := p.PreScore(ctx, state, pod, nodeInfos("a", "b")); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	cancel() // another plugin failed the cycle: NormalizeScore never runs, the call is dropped
	data, _ := state.Read(pendingKey)
	<-data.(*pendingAnswer).done
	if !p.breaker.allow() {
		t.Fatal("a call dropped with its cycle opened the breaker (threshold 1)")
	}
}

func TestReservedPodsAreSentAsAssumedUntilHeldUnreservedOrExpired(t *testing.T) {
	f := &fakeAdvisor{}
	p, c := start(t, f, func(a *Args) { a.AssumeTTL = metav1.Duration{Duration: 5 * time.Second} })
	ctx := context.Background()
	first, second := gpuPod("first", oneGPU, nil), gpuPod("second", oneGPU, nil)
	if st := p.Reserve(ctx, framework.NewCycleState(), first, "a"); !st.IsSuccess() {
		t.Fatal(st)
	}
	p.Reserve(ctx, framework.NewCycleState(), gpuPod("elsewhere", oneGPU, nil), "z")
	p.Reserve(ctx, framework.NewCycleState(), gpuPod("web", v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}, nil), "a")

	scoreCycle(t, p, second, nodeInfos("a", "b"))
	assumed := f.lastRequest(t).Assumed
	if len(assumed) != 1 || assumed[0].Node != "a" || assumed[0].Pod.Metadata.Name != "first" {
		t.Fatalf("assumed sent = %+v, want only the GPU pod reserved on a candidate node", assumed)
	}

	// The advisor's watch has seen "first" bound: it says so, and the plugin stops sending it.
	f.mu.Lock()
	f.held = []string{"ml/first"}
	f.mu.Unlock()
	scoreCycle(t, p, second, nodeInfos("a", "b"))
	f.mu.Lock()
	f.held = nil
	f.mu.Unlock()
	scoreCycle(t, p, second, nodeInfos("a", "b"))
	if got := f.lastRequest(t).Assumed; len(got) != 0 {
		t.Fatalf("after the advisor held it, assumed = %+v", got)
	}

	p.Reserve(ctx, framework.NewCycleState(), first, "a")
	p.Unreserve(ctx, framework.NewCycleState(), first, "a")
	scoreCycle(t, p, second, nodeInfos("a", "b"))
	if got := f.lastRequest(t).Assumed; len(got) != 0 {
		t.Fatalf("after Unreserve, assumed = %+v", got)
	}

	p.Reserve(ctx, framework.NewCycleState(), first, "b")
	c.t = c.t.Add(6 * time.Second)
	scoreCycle(t, p, second, nodeInfos("a", "b"))
	if got := f.lastRequest(t).Assumed; len(got) != 0 {
		t.Fatalf("after the TTL, assumed = %+v", got)
	}
}

func TestWirePodLeavesOutWhatTheAdvisorDoesNotRead(t *testing.T) {
	pod := gpuPod("p", oneGPU, map[string]string{lastApplied: strings.Repeat("x", 10_000), "gpuadvisor.io/gpu-milli": "500"})
	pod.Labels = map[string]string{"gpuadvisor.io/workload": "resnet50"}
	data, err := json.Marshal(toWire(pod))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if strings.Contains(text, lastApplied) || !strings.Contains(text, `"gpuadvisor.io/gpu-milli":"500"`) ||
		!strings.Contains(text, `"nvidia.com/gpu":"1"`) || !strings.Contains(text, `"gpuadvisor.io/workload":"resnet50"`) {
		t.Errorf("wire pod = %s", text)
	}
	if _, ok := pod.Annotations[lastApplied]; !ok {
		t.Error("toWire changed the pod's own annotations")
	}
}

func TestPodsWithResourceClaimsAreScoredWithTheirClaims(t *testing.T) {
	f := &fakeAdvisor{}
	p, _ := start(t, f, nil)
	pod := gpuPod("dra", v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}, nil)
	template := "one-gpu"
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template}}
	if _, st := scoreCycle(t, p, pod, nodeInfos("a")); st.IsSkip() || f.calls.Load() != 1 {
		t.Fatalf("a pod with a ResourceClaim got %v after %d calls; want it scored", st, f.calls.Load())
	}
	sent := f.lastRequest(t).Pod.Spec.ResourceClaims
	if len(sent) != 1 || sent[0].Name != "gpu" || sent[0].ResourceClaimTemplateName == nil || *sent[0].ResourceClaimTemplateName != template {
		t.Errorf("claims sent to the advisor: %+v", sent)
	}
}

// filterCycle runs PreFilter and Filter per node as the framework does: the PreFilter status and each node's
// Filter status (nil where PreFilter skipped the plugin's Filter).
func filterCycle(t *testing.T, p *Plugin, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.Status, map[string]*fwk.Status) {
	t.Helper()
	ctx := context.Background()
	res, status := p.PreFilter(ctx, state, pod, nodes)
	if res != nil {
		t.Fatalf("PreFilter narrowed the nodes: %+v", res)
	}
	if status.IsSkip() {
		return status, nil
	}
	if !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	out := map[string]*fwk.Status{}
	for _, n := range nodes {
		out[n.Node().Name] = p.Filter(ctx, state, pod, n)
	}
	return status, out
}

func TestWithoutTheFilterArgPreFilterSkipsWithoutACall(t *testing.T) {
	f := &fakeAdvisor{scores: map[string]float64{"a": 0}}
	p, _ := start(t, f, nil)
	if st, _ := filterCycle(t, p, framework.NewCycleState(), gpuPod("p", oneGPU, nil), nodeInfos("a")); !st.IsSkip() {
		t.Errorf("PreFilter without the filter arg: %v, want Skip", st)
	}
	if f.calls.Load() != 0 {
		t.Errorf("%d calls, want none", f.calls.Load())
	}
}

func TestFilterRefusesWhatTheAdvisorSaysDoesNotFitAndScoresWithTheSameCall(t *testing.T) {
	f := &fakeAdvisor{
		scores: map[string]float64{"never": 0, "full": 0, "good": 80, "fair": 40},
		never:  map[string]string{"never": "the node has 4 GPUs, the pod asks for 8"},
	}
	p, _ := start(t, f, func(a *Args) { a.Filter = true })
	before, _ := testutil.GetCounterMetricValue(filteredNodes.WithLabelValues("unresolvable"))
	state := framework.NewCycleState()
	pod := gpuPod("p", oneGPU, nil)
	all := nodeInfos("never", "full", "good", "fair", "unknown")
	_, got := filterCycle(t, p, state, pod, all)
	if st := got["never"]; st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "asks for 8") {
		t.Errorf("never: %v, want UnschedulableAndUnresolvable with the advisor's reason", st)
	}
	if st := got["full"]; st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "no free GPU now") {
		t.Errorf("full: %v, want Unschedulable with the advisor's reason", st)
	}
	for _, n := range []string{"good", "fair", "unknown"} {
		if !got[n].IsSuccess() {
			t.Errorf("%s: %v, want it to pass", n, got[n])
		}
	}
	if after, _ := testutil.GetCounterMetricValue(filteredNodes.WithLabelValues("unresolvable")); after-before != 1 {
		t.Errorf("unresolvable nodes counted %v, want 1", after-before)
	}
	if req := f.lastRequest(t); len(req.Nodes) != len(all) {
		t.Errorf("PreFilter asked about %v, want every node", req.Nodes)
	}
	// PreScore and Score on the nodes that passed: the PreFilter's answer, no second call.
	passed := nodeInfos("good", "fair", "unknown")
	if st := p.PreScore(context.Background(), state, pod, passed); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	for name, want := range map[string]int64{"good": 80, "fair": 40, "unknown": 50} {
		s, st := p.Score(context.Background(), state, pod, passed[map[string]int{"good": 0, "fair": 1, "unknown": 2}[name]])
		if !st.IsSuccess() || s != want {
			t.Errorf("Score(%s) = %d %v, want %d", name, s, st, want)
		}
	}
	if got := f.calls.Load(); got != 1 {
		t.Errorf("%d calls for one cycle with the filter, want 1", got)
	}
}

func TestFilterWithTheAdvisorDownFiltersNothingAndMakesNoSecondCall(t *testing.T) {
	f := &fakeAdvisor{status: http.StatusServiceUnavailable}
	p, _ := start(t, f, func(a *Args) { a.Filter = true })
	state := framework.NewCycleState()
	pod := gpuPod("p", oneGPU, nil)
	if st, _ := filterCycle(t, p, state, pod, nodeInfos("a", "b")); !st.IsSkip() {
		t.Fatalf("PreFilter with the advisor down: %v, want Skip (no filtering)", st)
	}
	if st := p.PreScore(context.Background(), state, pod, nodeInfos("a", "b")); !st.IsSkip() {
		t.Errorf("PreScore after a failed PreFilter call: %v, want Skip (neutral)", st)
	}
	if got := f.calls.Load(); got != 1 {
		t.Errorf("%d calls, want the cycle's one", got)
	}
}

func TestPreemptionDryRunMayFreeANodeThatLacksRoomNow(t *testing.T) {
	f := &fakeAdvisor{scores: map[string]float64{"full": 0, "never": 0}, never: map[string]string{"never": "too few GPUs"}}
	p, _ := start(t, f, func(a *Args) { a.Filter = true })
	state := framework.NewCycleState()
	pod := gpuPod("p", oneGPU, nil)
	nodes := nodeInfos("full", "never")
	filterCycle(t, p, state, pod, nodes)
	ctx := context.Background()
	for i, name := range []string{"full", "never"} {
		dryRun := state.Clone()
		victim := gpuPod("victim-"+name, oneGPU, nil)
		info, err := framework.NewPodInfo(victim)
		if err != nil {
			t.Fatal(err)
		}
		if st := p.PreFilterExtensions().RemovePod(ctx, dryRun, pod, info, nodes[i]); !st.IsSuccess() {
			t.Fatalf("RemovePod: %v", st)
		}
		st := p.Filter(ctx, dryRun, pod, nodes[i])
		if name == "full" && !st.IsSuccess() {
			t.Errorf("full, a GPU pod evicted: %v, want it left to NodeResourcesFit", st)
		}
		if name == "never" && st.Code() != fwk.UnschedulableAndUnresolvable {
			t.Errorf("never, a GPU pod evicted: %v, want still unresolvable", st)
		}
	}
	if st := p.Filter(ctx, state, pod, nodes[0]); st.Code() != fwk.Unschedulable {
		t.Errorf("the cycle's own state after the dry runs: %v, want full still Unschedulable", st)
	}
}

func TestNormalizeScoreFollowsTheNamesInWhateverOrderItIsGiven(t *testing.T) {
	f := &fakeAdvisor{scores: map[string]float64{"a": 20, "b": 40, "c": 80}}
	p, _ := start(t, f, nil)
	ctx := context.Background()
	pod, nodes := gpuPod("p", oneGPU, nil), nodeInfos("a", "b", "c")
	for _, order := range [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "c"}} {
		state := framework.NewCycleState()
		if st := p.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
			t.Fatalf("PreScore: %v", st)
		}
		scores := make(fwk.NodeScoreList, len(order))
		for i, n := range order {
			scores[i] = fwk.NodeScore{Name: n}
		}
		if st := p.NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
			t.Fatalf("NormalizeScore: %v", st)
		}
		want := map[string]int64{"a": 25, "b": 50, "c": 100}
		for _, s := range scores {
			if s.Score != want[s.Name] {
				t.Errorf("order %v: %s scored %d, want %d (the advisor's score of that node)", order, s.Name, s.Score, want[s.Name])
			}
		}
	}
}

func TestCallsShareOneKeptAliveConnection(t *testing.T) {
	var opened atomic.Int64
	f := &fakeAdvisor{scores: map[string]float64{"a": 20, "b": 80}}
	server := httptest.NewUnstartedServer(f)
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			opened.Add(1)
		}
	}
	server.Start()
	t.Cleanup(server.Close)
	p, _ := start(t, &fakeAdvisor{}, func(a *Args) { a.AdvisorURL = server.URL })
	for i := range 5 {
		scores, status := scoreCycle(t, p, gpuPod(fmt.Sprintf("p%d", i), oneGPU, nil), nodeInfos("a", "b"))
		if neutral(scores, status) {
			t.Fatalf("cycle %d scored neutrally", i)
		}
	}
	if got := opened.Load(); got != 1 {
		t.Errorf("%d connections opened for 5 calls, want 1 kept alive", got)
	}
}

func TestManyAssumedPodsAreSentOnTheirCandidatesInTheCandidatesOrder(t *testing.T) {
	for _, reserved := range []int{3, fewNodes + 4} {
		f := &fakeAdvisor{}
		p, _ := start(t, f, nil)
		ctx := context.Background()
		for i := range reserved {
			p.Reserve(ctx, framework.NewCycleState(), gpuPod(fmt.Sprintf("r%d", i), oneGPU, nil), fmt.Sprintf("n%d", i%5))
		}
		scoreCycle(t, p, gpuPod("next", oneGPU, nil), nodeInfos("n3", "x", "n1"))
		var nodes, pods []string
		for _, a := range f.lastRequest(t).Assumed {
			nodes, pods = append(nodes, a.Node), append(pods, a.Pod.Metadata.Name)
		}
		var wantNodes, wantPods []string
		for _, node := range []int{3, 1} {
			for i := range reserved {
				if i%5 == node {
					wantNodes, wantPods = append(wantNodes, fmt.Sprintf("n%d", node)), append(wantPods, fmt.Sprintf("r%d", i))
				}
			}
		}
		sort.Strings(pods) // the pods of one node come in no particular order
		sort.Strings(wantPods)
		if !equal(nodes, wantNodes) || !equal(pods, wantPods) {
			t.Errorf("%d reserved: assumed sent on %v (%v), want on %v (%v): the pods on candidates, in their order",
				reserved, nodes, pods, wantNodes, wantPods)
		}
	}
}

func TestAProfileScoringWithoutPreScoreFailsTheCycle(t *testing.T) {
	for _, filter := range []bool{false, true} {
		p, _ := start(t, &fakeAdvisor{}, func(a *Args) { a.Filter = filter })
		ctx := context.Background()
		state := framework.NewCycleState() // neither PreFilter's answer nor PreScore's call
		pod, nodes := gpuPod("p", oneGPU, nil), nodeInfos("a", "b")
		scores := fwk.NodeScoreList{{Name: "a"}, {Name: "b"}}
		_, scoreStatus := p.Score(ctx, state, pod, nodes[0])
		normalizeStatus := p.NormalizeScore(ctx, state, pod, scores)
		if scoreStatus.IsSuccess() && normalizeStatus.IsSuccess() {
			t.Errorf("filter %v: a cycle without the advisor's call was scored (Score %v, NormalizeScore %v)",
				filter, scoreStatus, normalizeStatus)
		}
	}
}

func TestReserveKeepsThePodAsTheCyclesCallSentIt(t *testing.T) {
	f := &fakeAdvisor{scores: map[string]float64{"a": 20, "b": 80}}
	p, _ := start(t, f, nil)
	ctx := context.Background()
	pod, nodes := gpuPod("placed", oneGPU, map[string]string{"gpuadvisor.io/gpu-milli": "1000"}), nodeInfos("a", "b")
	state := framework.NewCycleState()
	if st := p.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	if st := p.NormalizeScore(ctx, state, pod, scoreEach(t, ctx, p, state, pod, nodes)); !st.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", st)
	}
	sent := podSent(state)
	if sent == nil {
		t.Fatal("the cycle's call kept no encoding of the pod for Reserve")
	}
	p.Reserve(ctx, state, pod, "a")
	scoreCycle(t, p, gpuPod("next", oneGPU, nil), nodes)
	var got, want map[string]any
	body, _ := json.Marshal(f.lastRequest(t).Assumed[0].Pod)
	whole, _ := json.Marshal(toWire(pod))
	_ = json.Unmarshal(body, &got)
	_ = json.Unmarshal(whole, &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("assumed pod sent %s, want %s", body, whole)
	}
}
