// Package gpuadvisor is the scheduler-framework plugin that asks gpuadvisor's advisor where a GPU pod should go.
//
// PreScore makes one batched POST /v1/score per scheduling cycle for the pod and the nodes that passed Filter and
// keeps the answer in the CycleState; Score only reads it, NormalizeScore stretches the best node to MaxNodeScore.
// Pods that ask for no GPU are skipped and cost no call. Reserve/Unreserve keep the pods this scheduler has just
// placed and sends them with the next requests, so a burst does not pick the same free GPU twice before the
// advisor's pod watch sees the first binding. When the advisor is slow or down the cycle goes on with neutral
// scores (the plugin skips itself), a circuit breaker stops calling it for a while, and one line is logged.
package gpuadvisor

import (
	"context"
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

const stateKey fwk.StateKey = Name + "/scores"

// Plugin is the GPUAdvisor scheduler plugin.
type Plugin struct {
	args    *Args
	client  *advisorClient
	breaker *breaker
	assumed *assumedPods
	now     func() time.Time
}

var (
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
		now:     now,
	}
}

// Name is the plugin's name.
func (p *Plugin) Name() string { return Name }

// cycleScores is the advisor's answer for one cycle: 0..100 per node. Read-only once written, so Clone shares it.
type cycleScores struct {
	scores map[string]int64
}

func (s *cycleScores) Clone() fwk.StateData { return s }

// PreScore asks the advisor once for the pod on every node that passed Filter.
func (p *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if !wantsGPU(pod) || len(nodes) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	if !p.breaker.allow() {
		fallbacks.WithLabelValues("circuit_open").Inc()
		return fwk.NewStatus(fwk.Skip)
	}
	names := make([]string, len(nodes))
	candidates := make(map[string]struct{}, len(nodes))
	for i, n := range nodes {
		names[i] = n.Node().Name
		candidates[names[i]] = struct{}{}
	}
	assumed, held := p.assumed.on(candidates)
	assumedGauge.Set(float64(held))
	req := &scoreRequest{Pod: toWire(pod), Nodes: names, UnknownNodes: "neutral", Assumed: assumed}
	start := p.now()
	answer, err := p.client.score(ctx, req)
	elapsed := p.now().Sub(start).Seconds()
	if err != nil {
		advisorCalls.WithLabelValues("error").Inc()
		advisorLatency.WithLabelValues("error").Observe(elapsed)
		fallbacks.WithLabelValues("error").Inc()
		if p.breaker.failure() {
			klog.FromContext(ctx).Error(err, "gpuadvisor: the advisor does not answer; GPU pods are scored neutrally",
				"advisor", p.args.AdvisorURL, "retryAfter", p.args.OpenDuration.Duration)
		} else {
			klog.FromContext(ctx).V(4).Info("gpuadvisor: score call failed", "pod", klog.KObj(pod), "err", err)
		}
		return fwk.NewStatus(fwk.Skip)
	}
	advisorCalls.WithLabelValues("ok").Inc()
	advisorLatency.WithLabelValues("ok").Observe(elapsed)
	if p.breaker.success() {
		klog.FromContext(ctx).Info("gpuadvisor: the advisor answers again", "advisor", p.args.AdvisorURL)
	}
	p.assumed.forget(answer.AssumedHeld)
	scores := make(map[string]int64, len(answer.Scores))
	for _, v := range answer.Scores {
		scores[v.Node] = clampScore(v.Score)
	}
	state.Write(stateKey, &cycleScores{scores: scores})
	return nil
}

func clampScore(score float64) int64 {
	s := int64(math.Round(score))
	return max(fwk.MinNodeScore, min(fwk.MaxNodeScore, s))
}

// Score reads the node's score from the cycle's answer; a node the advisor did not name scores neutrally.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: no scores in the cycle state: %w", Name, err))
	}
	s, ok := data.(*cycleScores)
	if !ok {
		return 0, fwk.AsStatus(fmt.Errorf("%s: cycle state holds %T, not the scores", Name, data))
	}
	score, ok := s.scores[nodeInfo.Node().Name]
	if !ok {
		return (fwk.MaxNodeScore + fwk.MinNodeScore) / 2, nil
	}
	return score, nil
}

// ScoreExtensions returns the plugin itself (NormalizeScore).
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore stretches the scores so that the best node gets MaxNodeScore, keeping their ratios: the profile's
// weight then says how much the advisor's choice counts against the other plugins', whatever the spread of its
// 0..100 scores.
func (p *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
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
func (p *Plugin) Reserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if wantsGPU(pod) {
		p.assumed.add(pod.UID, nodeName, toWire(pod))
		assumedGauge.Set(float64(p.assumed.len()))
	}
	return nil
}

// Unreserve forgets a pod whose placement was given up (a later plugin rejected it, or binding failed).
func (p *Plugin) Unreserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	p.assumed.remove(pod.UID)
	assumedGauge.Set(float64(p.assumed.len()))
}
