package gpuadvisor

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// burst is a scheduler in a burst: `pods` assumed pods, pod i on node n<i%nodes>, as many as the advisor's watch
// is behind by.
func burst(pods, nodes int, c *clock) *assumedPods {
	a := newAssumedPods(30*time.Second, c.now)
	for i := range pods {
		pod := toWire(gpuPod(fmt.Sprintf("r%d", i), oneGPU, nil))
		a.add(types.UID(fmt.Sprintf("uid-r%d", i)), fmt.Sprintf("n%d", i%nodes), pod, []byte(`{}`))
	}
	return a
}

func candidates(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("n%d", i))
	}
	return out
}

func TestACycleWithoutAssumedPodsOnItsCandidatesAllocatesNothing(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	for _, pods := range []int{3, 40} {
		a := burst(pods, 100, c)
		window := candidates(1000, 1500) // none of the pods' nodes
		allocs := testing.AllocsPerRun(100, func() {
			if out, held := a.on(window); len(out) != 0 || held != pods {
				t.Fatalf("on = %d pods, %d held; want none of %d", len(out), held, pods)
			}
		})
		if allocs != 0 {
			t.Errorf("%d assumed pods, none on the candidates: %.0f allocations a cycle, want 0", pods, allocs)
		}
	}
}

func TestTheAssumedPodsIndexFollowsReserveUnreserveHeldAndExpiry(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	a := burst(fewNodes+12, 10, c)                                // r0..r19 on n0..n9, two a node
	a.remove("uid-r3")                                            // Unreserve: n3 keeps r13
	a.forget([]string{"ml/r4", "ml/r14", "ml/nobody"})            // the advisor holds both pods of n4
	a.add("uid-r5", "n7", toWire(gpuPod("r5", oneGPU, nil)), nil) // reserved again elsewhere: n5 keeps r15, n7 has three
	c.t = c.t.Add(10 * time.Second)
	a.add("uid-late", "n6", toWire(gpuPod("late", oneGPU, nil)), nil)
	c.t = c.t.Add(25 * time.Second) // all but "late" and r5 (added later) expired? no: only those added at the start
	got := func(nodes []string) []string {
		out, _ := a.on(nodes)
		var names []string
		for _, w := range out {
			names = append(names, w.Node+"/"+w.Pod.Metadata.Name)
		}
		sort.Strings(names)
		return names
	}
	// 35 s after the burst: its pods expired (ttl 30 s); "late" (25 s old) and none else remain.
	if names := got(candidates(0, 10)); !equal(names, []string{"n6/late"}) {
		t.Errorf("after expiry, assumed on the candidates = %v, want [n6/late]", names)
	}
	if a.len() != 1 {
		t.Errorf("%d assumed pods held after expiry, want 1", a.len())
	}

	c.t = time.Unix(1_800_000_000, 0)
	a = burst(fewNodes+12, 10, c)
	a.remove("uid-r3")
	a.forget([]string{"ml/r4", "ml/r14", "ml/nobody"})
	a.add("uid-r5", "n7", toWire(gpuPod("r5", oneGPU, nil)), nil)
	want := []string{"n3/r13", "n5/r15", "n7/r17", "n7/r5", "n7/r7"}
	if names := got([]string{"n3", "n4", "n5", "n7"}); !equal(names, want) {
		t.Errorf("assumed on n3, n4, n5, n7 = %v, want %v", names, want)
	}
	if a.len() != fewNodes+12-3 {
		t.Errorf("%d assumed pods held, want %d", a.len(), fewNodes+12-3)
	}
	for node, pods := range a.byNode {
		for _, p := range pods {
			if p.node != node || a.pods[p.uid] != p {
				t.Errorf("index entry %s → %s/%s is not the pod held", node, p.node, p.key)
			}
		}
	}
}

// BenchmarkAssumedOn is one cycle's look for assumed pods during a burst at 5,000 nodes: 40 pods assumed (the
// advisor's watch that far behind), 500 candidates, 2 of them with an assumed pod.
func BenchmarkAssumedOn(b *testing.B) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	a := burst(40, 5000, c) // on n0..n39
	window := candidates(38, 538)
	b.ReportAllocs()
	for b.Loop() {
		if out, _ := a.on(window); len(out) != 2 {
			b.Fatalf("%d assumed pods on the candidates, want 2", len(out))
		}
	}
}
