// Package gpuadvisor is the scheduler-framework plugin that asks gpuadvisor's advisor where a GPU pod should go.
//
// PreScore makes one batched POST /v1/score per scheduling cycle for the pod and the nodes that passed Filter, and
// does not wait for it: the call runs while the framework runs the other plugins' Score over every node (the advisor
// and the scheduler then work at the same time), Score gives a placeholder, and NormalizeScore waits for the answer,
// writes the advisor's score of each node and stretches the best node to MaxNodeScore. The scores are the ones the
// answer says either way; a failed call leaves every node the same score (0), which weighs nothing, as a skip.
// Pods that ask for no GPU are skipped and cost no call. Reserve/Unreserve keep the pods this scheduler has just
// placed and sends them with the next requests, so a burst does not pick the same free GPU twice before the
// advisor's pod watch sees the first binding. When the advisor is slow or down the cycle goes on with neutral
// scores (the plugin skips itself), a circuit breaker stops calling it for a while, and one line is logged.
//
// With the `filter` arg the call moves to PreFilter, for every node: Filter then refuses the nodes the advisor says
// the pod does not fit (UnschedulableAndUnresolvable where it never can, as the extender's FailedAndUnresolvableNodes;
// Unschedulable where it lacks room now), and PreScore reuses that answer. Either way one call per cycle, asking for
// the brief answer (verdicts without explanations).
//
// Consecutive cycles of a burst ask about pods of one shape, and between two of them only the nodes a binding, a
// snapshot or an assumed pod touched change: the plugin holds the advisor's verdicts per pod shape with the token
// the advisor gave them (`heldAnswers`), sends that token, and merges the answer, which then carries only the
// entries that changed (a delta). Every candidate must end with a verdict, or the cycle is scored neutrally.
package gpuadvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile.
const Name = "GPUAdvisor"

const stateKey fwk.StateKey = Name + "/answer"

// pendingKey holds PreScore's call while it runs (`pendingAnswer`), for NormalizeScore.
const pendingKey fwk.StateKey = Name + "/pending"

// Plugin is the GPUAdvisor scheduler plugin.
type Plugin struct {
	args    *Args
	client  *advisorClient
	breaker *breaker
	assumed *assumedPods
	held    *heldAnswers
	since   *sinceGate
	metrics pluginMetrics
	now     func() time.Time
}

var (
	_ fwk.PreFilterPlugin = &Plugin{}
	_ fwk.FilterPlugin    = &Plugin{}
	_ fwk.PreScorePlugin  = &Plugin{}
	_ fwk.ScorePlugin     = &Plugin{}
	_ fwk.ScoreExtensions = &Plugin{}
	_ fwk.ReservePlugin   = &Plugin{}
)

// New is the plugin's factory (app.WithPlugin(Name, New)).
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	token := ""
	if args.TokenFile != "" {
		data, err := os.ReadFile(args.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s args: tokenFile: %w", Name, err)
		}
		token = strings.TrimSpace(string(data))
	}
	registerMetrics()
	return newPlugin(args, token, time.Now), nil
}

func newPlugin(args *Args, token string, now func() time.Time) *Plugin {
	return &Plugin{
		args:    args,
		client:  newAdvisorClient(args.AdvisorURL, token, args.Timeout.Duration),
		breaker: &breaker{threshold: args.FailureThreshold, open: args.OpenDuration.Duration, now: now},
		assumed: newAssumedPods(args.AssumeTTL.Duration, now),
		held:    newHeldAnswers(maxHeldShapes),
		since:   &sinceGate{now: now},
		metrics: newPluginMetrics(),
		now:     now,
	}
}

// Name is the plugin's name.
func (p *Plugin) Name() string { return Name }

// verdict is the advisor's word on one node for the cycle's pod.
type verdict struct {
	score        int64 // 0..100
	feasible     bool
	known        bool
	unresolvable bool   // infeasible and never feasible, whatever leaves the node
	reason       string // why infeasible
	// merged marks a verdict written from an answer, keyed by the answer's copy of the node's name. The first cycle
	// that finds it among its candidates writes it again under the candidate's name, the string the scheduler's
	// NodeInfo holds: the next cycles' lookups then find a key at the same address as theirs, which Go compares
	// without reading its bytes (the held map's keys are otherwise scattered small strings, a cache miss each).
	merged bool
}

// cycleAnswer is the advisor's answer for one cycle (or that its one call failed). The verdicts are read-only once
// written and shared by every clone; freed is what preemption's dry run has done to a clone (RemovePod), copied.
type cycleAnswer struct {
	failed   bool
	verdicts map[string]verdict
	// names are the candidates PreScore asked about, in its order, and scores their scores: the framework gives
	// NormalizeScore the same nodes in the same order, which then reads the scores by index, not by name.
	names  []string
	scores []int64
	// pod is the pod's JSON as the call sent it, for Reserve to keep (nil if the call never encoded it).
	pod json.RawMessage
	// freed are the nodes a GPU pod has been removed from in this (cloned) state: preemption asking whether evicting
	// it makes room. The advisor's "no room now" does not hold there; NodeResourcesFit judges instead.
	freed map[string]struct{}
}

func (s *cycleAnswer) Clone() fwk.StateData {
	if len(s.freed) == 0 {
		return &cycleAnswer{failed: s.failed, verdicts: s.verdicts, names: s.names, scores: s.scores, pod: s.pod}
	}
	freed := make(map[string]struct{}, len(s.freed))
	for n := range s.freed {
		freed[n] = struct{}{}
	}
	return &cycleAnswer{failed: s.failed, verdicts: s.verdicts, names: s.names, scores: s.scores, pod: s.pod, freed: freed}
}

// pendingAnswer is PreScore's call, answered once done is closed (then answer is set and never written again).
type pendingAnswer struct {
	done   chan struct{}
	answer *cycleAnswer
}

// Clone shares the call: it is read-only once answered, and a clone's NormalizeScore waits for the same answer.
func (p *pendingAnswer) Clone() fwk.StateData { return p }

// wait returns the answer once the call is done, or a failed one if the cycle's context ends first.
func (p *pendingAnswer) wait(ctx context.Context) *cycleAnswer {
	select {
	case <-p.done:
		return p.answer
	case <-ctx.Done():
		return &cycleAnswer{failed: true}
	}
}

func readAnswer(state fwk.CycleState) (*cycleAnswer, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, err
	}
	s, ok := data.(*cycleAnswer)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state holds %T, not the advisor's answer", Name, data)
	}
	return s, nil
}

// PreFilter, with the `filter` arg, asks the advisor once for the pod on every node, before Filter: its verdicts
// filter the nodes and its scores serve PreScore (no second call). Without the arg, or for a pod that asks for no
// GPU, or with the advisor down (nothing is filtered), the plugin's Filter is skipped.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !p.args.Filter || !wantsGPU(pod) || len(nodes) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	answer := p.ask(ctx, pod, nodes)
	state.Write(stateKey, answer)
	if answer.failed {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

// PreFilterExtensions returns the plugin itself (AddPod, RemovePod), for preemption's dry runs.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod changes nothing: a pod added to a node only takes room, which NodeResourcesFit counts.
func (p *Plugin) AddPod(context.Context, fwk.CycleState, *v1.Pod, fwk.PodInfo, fwk.NodeInfo) *fwk.Status {
	return nil
}

// RemovePod notes a GPU pod taken off a node in this state (preemption asking whether evicting it makes room), so
// that Filter does not hold the advisor's "no room now" against that node.
func (p *Plugin) RemovePod(_ context.Context, state fwk.CycleState, _ *v1.Pod, removed fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	if !wantsGPU(removed.GetPod()) {
		return nil
	}
	answer, err := readAnswer(state)
	if err != nil || answer.failed {
		return nil
	}
	if answer.freed == nil {
		answer.freed = map[string]struct{}{}
	}
	answer.freed[nodeInfo.Node().Name] = struct{}{}
	return nil
}

// Filter turns the advisor's verdict into the framework's: a node that can never host the pod is
// UnschedulableAndUnresolvable (preemption does not try it), one that lacks room now is Unschedulable; a node the
// advisor does not know, or an answer missing, lets the pod through.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	answer, err := readAnswer(state)
	if err != nil || answer.failed {
		return nil
	}
	name := nodeInfo.Node().Name
	v, ok := answer.verdicts[name]
	if !ok || !v.known || v.feasible {
		return nil
	}
	if v.unresolvable {
		p.metrics.filteredUnresolvable.Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "gpuadvisor: "+v.reason)
	}
	if _, freed := answer.freed[name]; freed {
		return nil
	}
	p.metrics.filteredUnschedulable.Inc()
	return fwk.NewStatus(fwk.Unschedulable, "gpuadvisor: "+v.reason)
}

// PreScore asks the advisor once for the pod on every node that passed Filter, unless PreFilter has asked already.
// The call is started here and answered in the background (NormalizeScore waits for it); with the breaker open no
// call is made and the plugin skips itself.
func (p *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if !wantsGPU(pod) || len(nodes) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	if asked, err := readAnswer(state); err == nil {
		if asked.failed {
			return fwk.NewStatus(fwk.Skip)
		}
		return nil
	}
	if !p.breaker.allow() {
		p.metrics.fallbackOpen.Inc()
		return fwk.NewStatus(fwk.Skip)
	}
	req := p.request(pod, nodes)
	pending := &pendingAnswer{done: make(chan struct{})}
	go func() {
		defer close(pending.done)
		pending.answer = p.call(ctx, pod, req)
	}()
	state.Write(pendingKey, pending)
	return nil
}

// ask makes the cycle's one call and waits for it (PreFilter, whose Filter needs the verdicts at once); a failure
// (or an open breaker) is an answer marked failed.
func (p *Plugin) ask(ctx context.Context, pod *v1.Pod, nodes []fwk.NodeInfo) *cycleAnswer {
	if !p.breaker.allow() {
		p.metrics.fallbackOpen.Inc()
		return &cycleAnswer{failed: true}
	}
	return p.call(ctx, pod, p.request(pod, nodes))
}

// request is the cycle's score request: the pod, the nodes, and the assumed pods on those nodes as they are now
// (taken in the cycle itself, before any later Reserve).
func (p *Plugin) request(pod *v1.Pod, nodes []fwk.NodeInfo) *scoreRequest {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Node().Name
	}
	assumed, held := p.assumed.on(names)
	p.metrics.assumed.Set(float64(held))
	return &scoreRequest{Pod: toWire(pod), Nodes: names, UnknownNodes: "neutral", Assumed: assumed, Detail: "brief"}
}

// call posts the request; a failure is an answer marked failed, counted and logged once when it opens the breaker.
// A call cut short because its scheduling cycle ended (another plugin failed it) says nothing about the advisor.
//
// The request carries the token of the verdicts held for the pod's shape (`heldAnswers`); a delta answer is merged
// into them. An answer that leaves a candidate without a verdict fails the cycle's call (neutral scores) and drops
// what was held, so that the next call asks for a full answer. An advisor older than delta answers refuses `since`
// with a 422: the request is sent again without it at once, and no request carries it for sinceRetry.
func (p *Plugin) call(ctx context.Context, pod *v1.Pod, req *scoreRequest) *cycleAnswer {
	encoded, key := encodePod(req.Pod)
	req.encodedPod = encoded
	answer := p.advise(ctx, pod, req, key)
	answer.pod = encoded
	return answer
}

// advise is call once the pod is encoded (key: its shape).
func (p *Plugin) advise(ctx context.Context, pod *v1.Pod, req *scoreRequest, key uint64) *cycleAnswer {
	var prev *heldShape
	if p.since.on() {
		prev = p.held.take(key)
		since := ""
		if prev != nil {
			since = prev.token
		}
		req.Since = &since
	}
	start := p.now()
	answer, err := p.client.score(ctx, req)
	if err != nil && req.Since != nil && ctx.Err() == nil && refusedAsInvalid(err) {
		if p.since.refused() {
			klog.FromContext(ctx).Info("gpuadvisor: the advisor refuses delta requests (`since`); asking for full answers",
				"advisor", p.args.AdvisorURL, "retryAfter", sinceRetry, "err", err)
		}
		req.Since, prev = nil, nil
		answer, err = p.client.score(ctx, req)
	}
	elapsed := p.now().Sub(start).Seconds()
	if err != nil && ctx.Err() != nil {
		p.breaker.abandon()
		return &cycleAnswer{failed: true}
	}
	if err != nil {
		p.metrics.callsError.Inc()
		p.metrics.latencyError.Observe(elapsed)
		p.metrics.fallbackError.Inc()
		if p.breaker.failure() {
			klog.FromContext(ctx).Error(err, "gpuadvisor: the advisor does not answer; GPU pods are scored neutrally",
				"advisor", p.args.AdvisorURL, "retryAfter", p.args.OpenDuration.Duration)
		} else {
			klog.FromContext(ctx).V(4).Info("gpuadvisor: score call failed", "pod", klog.KObj(pod), "err", err)
		}
		return &cycleAnswer{failed: true}
	}
	p.metrics.callsOK.Inc()
	p.metrics.latencyOK.Observe(elapsed)
	if p.breaker.success() {
		klog.FromContext(ctx).Info("gpuadvisor: the advisor answers again", "advisor", p.args.AdvisorURL)
	}
	p.assumed.forget(answer.AssumedHeld)
	delta := answer.Delta != nil && *answer.Delta
	var verdicts map[string]verdict
	if delta && prev != nil {
		verdicts = prev.verdicts
	} else {
		verdicts = make(map[string]verdict, len(answer.Scores))
	}
	for _, v := range answer.Scores {
		verdicts[v.Node] = verdict{
			score: clampScore(v.Score), feasible: v.Feasible, known: v.Known,
			unresolvable: v.Unresolvable, reason: v.Reason, merged: true,
		}
	}
	scores := make([]int64, len(req.Nodes))
	for i, n := range req.Nodes {
		v, ok := verdicts[n]
		if ok && v.merged {
			v.merged = false
			verdicts[n] = v // keyed by the candidate's own name from now on
		}
		if !ok {
			p.metrics.answersUncovered.Inc()
			p.metrics.fallbackUncovered.Inc()
			klog.FromContext(ctx).V(2).Info("gpuadvisor: the advisor's answer leaves a candidate without a score; scored neutrally",
				"pod", klog.KObj(pod), "node", n, "delta", delta)
			return &cycleAnswer{failed: true}
		}
		scores[i] = v.score
	}
	if delta {
		p.metrics.answersDelta.Inc()
	} else {
		p.metrics.answersFull.Inc()
	}
	if answer.Token != nil && *answer.Token != "" {
		p.held.give(&heldShape{key: key, token: *answer.Token, verdicts: verdicts})
	}
	return &cycleAnswer{verdicts: verdicts, names: req.Nodes, scores: scores}
}

func clampScore(score float64) int64 {
	s := int64(math.Round(score))
	return max(fwk.MinNodeScore, min(fwk.MaxNodeScore, s))
}

// Score reads the node's score from the cycle's answer (PreFilter's call); while PreScore's call is still running
// it gives 0, which NormalizeScore replaces with the answer's score. Without the `filter` arg only PreScore's call
// can be in the cycle state: Score then gives 0 without looking (a lookup a node, ~500 a cycle), and NormalizeScore
// fails the cycle if there is no call.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	if !p.args.Filter {
		return 0, nil
	}
	answer, err := readAnswer(state)
	if err != nil {
		if _, pendingErr := state.Read(pendingKey); pendingErr == nil {
			return 0, nil
		}
		return 0, fwk.AsStatus(fmt.Errorf("%s: no scores in the cycle state: %w", Name, err))
	}
	return answer.scoreOf(nodeInfo.Node().Name), nil
}

// scoreOf is the advisor's score of a node; a node it did not name scores neutrally.
func (s *cycleAnswer) scoreOf(node string) int64 {
	v, ok := s.verdicts[node]
	if !ok {
		return (fwk.MaxNodeScore + fwk.MinNodeScore) / 2
	}
	return v.score
}

// ScoreExtensions returns the plugin itself (NormalizeScore).
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore stretches the scores so that the best node gets MaxNodeScore, keeping their ratios: the profile's
// weight then says how much the advisor's choice counts against the other plugins', whatever the spread of its
// 0..100 scores.
//
// With PreScore's call it first waits for the answer and writes each node's score from it; a failed call leaves
// every node 0 (the same for all: the advisor weighs nothing in this cycle). With neither PreScore's call nor
// PreFilter's answer in the cycle state (a profile that enables the plugin at score but not at preScore) the cycle
// fails.
func (p *Plugin) NormalizeScore(ctx context.Context, state fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	if data, err := state.Read(pendingKey); err == nil {
		pending, ok := data.(*pendingAnswer)
		if !ok {
			return fwk.AsStatus(fmt.Errorf("%s: cycle state holds %T, not the advisor's call", Name, data))
		}
		answer := pending.wait(ctx)
		aligned := len(answer.scores) == len(scores)
		for i := range scores {
			switch {
			case answer.failed:
				scores[i].Score = 0
			case aligned && answer.names[i] == scores[i].Name:
				scores[i].Score = answer.scores[i]
			default:
				scores[i].Score = answer.scoreOf(scores[i].Name)
			}
		}
	} else if _, answerErr := readAnswer(state); answerErr != nil {
		return fwk.AsStatus(fmt.Errorf("%s: no scores in the cycle state: %w", Name, err))
	}
	var best int64
	for _, s := range scores {
		best = max(best, s.Score)
	}
	if best <= 0 {
		return nil
	}
	for i := range scores {
		scores[i].Score = scores[i].Score * fwk.MaxNodeScore / best
	}
	return nil
}

// Reserve remembers a GPU pod placed on a node until the advisor sees it bound (AssumeTTL).
func (p *Plugin) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if wantsGPU(pod) {
		p.assumed.add(pod.UID, nodeName, toWire(pod), podSent(state))
		p.metrics.assumed.Set(float64(p.assumed.len()))
	}
	return nil
}

// podSent is the pod's JSON as the cycle's call sent it, once that call is over (nil otherwise): Reserve keeps it
// rather than encoding the pod again.
func podSent(state fwk.CycleState) json.RawMessage {
	if data, err := state.Read(pendingKey); err == nil {
		if pending, ok := data.(*pendingAnswer); ok {
			select {
			case <-pending.done:
				return pending.answer.pod
			default:
				return nil
			}
		}
	}
	if answer, err := readAnswer(state); err == nil {
		return answer.pod
	}
	return nil
}

// Unreserve forgets a pod whose placement was given up (a later plugin rejected it, or binding failed).
func (p *Plugin) Unreserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	p.assumed.remove(pod.UID)
	p.metrics.assumed.Set(float64(p.assumed.len()))
}
