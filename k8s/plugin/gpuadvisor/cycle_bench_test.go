package gpuadvisor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// deltaAdvisor answers as the advisor does in a burst at cluster scale once the plugin holds every node's verdict:
// the first call gets every node (a full answer), each later one the two entries that changed (a delta) and the pod
// placed two cycles before as held by its watch. It reads each request whole but does not decode it, so that a
// benchmark's CPU is the plugin's.
type deltaAdvisor struct {
	nodes []string
	calls atomic.Int64
}

func (d *deltaAdvisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := int(d.calls.Add(1))
	out := []byte(`{"scores":[`)
	entries := d.nodes
	if n > 1 {
		entries = []string{d.nodes[n%len(d.nodes)], d.nodes[(n*7)%len(d.nodes)]}
	}
	for i, node := range entries {
		if i > 0 {
			out = append(out, ',')
		}
		out = fmt.Appendf(out, `{"node":%q,"score":%d,"feasible":true,"known":true}`, node, (i*37+n)%100+1)
	}
	out = append(out, `],"assumed_held":[`...)
	if n > 2 {
		out = strconv.AppendQuote(out, "ml/p"+strconv.Itoa(n-2))
	}
	out = fmt.Appendf(out, `],"token":"t%d","delta":%t}`, n, n > 1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// BenchmarkScoreCycle is the plugin's part of one scheduling cycle at 5,000 nodes as kube-scheduler runs it:
// PreScore on 500 candidates (the window moving on by 500 nodes each cycle, as percentageOfNodesToScore's does),
// Score per candidate, NormalizeScore waiting for the delta answer, and Reserve. `go test -bench ScoreCycle
// -benchmem -cpuprofile` shows what the plugin costs the scheduler a pod (the advisor here is a canned answer, its
// HTTP server in the same process: cpu-ns/op counts it too).
func BenchmarkScoreCycle(b *testing.B) {
	const clusterNodes, candidates = 5000, 500
	names := make([]string, clusterNodes)
	for i := range names {
		names[i] = fmt.Sprintf("gpu-node-%05d", i)
	}
	infos := nodeInfos(names...)
	// A loaded host can stretch a call past the default timeout: a neutral cycle is not the cycle measured.
	p, _ := startHandler(b, &deltaAdvisor{nodes: names}, func(a *Args) { a.Timeout = metav1.Duration{Duration: time.Minute} })
	ctx := context.Background()
	scores := make(fwk.NodeScoreList, candidates)
	cycle := func(i int) {
		pod := gpuPod("p"+strconv.Itoa(i), oneGPU, nil)
		start := (i * candidates) % clusterNodes
		window := infos[start : start+candidates]
		state := framework.NewCycleState()
		if st := p.PreScore(ctx, state, pod, window); !st.IsSuccess() {
			b.Fatalf("PreScore: %v", st)
		}
		for j, n := range window {
			s, st := p.Score(ctx, state, pod, n)
			if !st.IsSuccess() {
				b.Fatalf("Score: %v", st)
			}
			scores[j] = fwk.NodeScore{Name: n.Node().Name, Score: s}
		}
		if st := p.NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
			b.Fatalf("NormalizeScore: %v", st)
		}
		if scores[0].Score == 0 && scores[1].Score == 0 {
			b.Fatal("the cycle was scored neutrally")
		}
		_ = p.Reserve(ctx, state, pod, window[0].Node().Name)
	}
	cycle(0) // the full answer: every node's verdict held from here on
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	for i := 1; i <= b.N; i++ {
		cycle(i)
	}
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used (user and system): the plugin's and the canned advisor's, with
// the garbage collector's, where ns/op is wall time and counts waiting for a core too.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
