package gpuadvisor

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const metricsSubsystem = "gpuadvisor_plugin"

// The plugin's own metrics, on the scheduler's /metrics (the legacy registry kube-scheduler serves).
var (
	advisorCalls = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "advisor_calls_total",
		Help:           "Calls to the advisor's /v1/score by result (ok, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	advisorLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      metricsSubsystem,
		Name:           "advisor_call_duration_seconds",
		Help:           "Duration of calls to the advisor's /v1/score, answered or not.",
		Buckets:        []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2},
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	fallbacks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "fallbacks_total",
		Help:           "GPU pods scored neutrally, by reason (error: the call failed; circuit_open: no call was made; uncovered: the answer left a candidate without a score).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	assumedGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      metricsSubsystem,
		Name:           "assumed_pods",
		Help:           "Reserved GPU pods sent to the advisor as assumed until its watch sees them bound.",
		StabilityLevel: metrics.ALPHA,
	})
	filteredNodes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "filtered_nodes_total",
		Help:           "Nodes Filter refused (the filter arg) by verdict: unresolvable (never fits), unschedulable (no room now).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"verdict"})
	answers = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "advisor_answers_total",
		Help:           "The advisor's answers by kind: full (every candidate), delta (only the entries changed since the verdicts held for the pod's shape, merged into them), uncovered (a candidate left without a score: scored neutrally).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(advisorCalls, advisorLatency, fallbacks, assumedGauge, filteredNodes, answers)
	})
}

// pluginMetrics are the label values a cycle records, looked up once (a vector's lookup hashes the labels under a
// lock on every call). Taken after registerMetrics: before it, a vector gives a no-op.
type pluginMetrics struct {
	callsOK, callsError                         metrics.CounterMetric
	latencyOK, latencyError                     metrics.ObserverMetric
	fallbackOpen, fallbackError                 metrics.CounterMetric
	fallbackUncovered                           metrics.CounterMetric
	answersFull, answersDelta                   metrics.CounterMetric
	answersUncovered                            metrics.CounterMetric
	filteredUnresolvable, filteredUnschedulable metrics.CounterMetric
	assumed                                     *metrics.Gauge
}

func newPluginMetrics() pluginMetrics {
	return pluginMetrics{
		callsOK:               advisorCalls.WithLabelValues("ok"),
		callsError:            advisorCalls.WithLabelValues("error"),
		latencyOK:             advisorLatency.WithLabelValues("ok"),
		latencyError:          advisorLatency.WithLabelValues("error"),
		fallbackOpen:          fallbacks.WithLabelValues("circuit_open"),
		fallbackError:         fallbacks.WithLabelValues("error"),
		fallbackUncovered:     fallbacks.WithLabelValues("uncovered"),
		answersFull:           answers.WithLabelValues("full"),
		answersDelta:          answers.WithLabelValues("delta"),
		answersUncovered:      answers.WithLabelValues("uncovered"),
		filteredUnresolvable:  filteredNodes.WithLabelValues("unresolvable"),
		filteredUnschedulable: filteredNodes.WithLabelValues("unschedulable"),
		assumed:               assumedGauge,
	}
}
