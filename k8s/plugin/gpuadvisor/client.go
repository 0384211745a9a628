package gpuadvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// scorePath is the advisor's native scoring route (advisor/api/routes/score.py).
const scorePath = "/v1/score"

// maxAnswerBytes bounds what is read of one answer: ~70 bytes per node brief (~400 explained), 20,000 nodes at most.
const maxAnswerBytes = 16 << 20

// scoreRequest is the advisor's ScoreRequest: the pod, the nodes that passed Filter, unknown nodes scored neutrally
// rather than refused, and the pods this scheduler has reserved but the advisor may not have seen bound yet.
type scoreRequest struct {
	Pod          wirePod       `json:"pod"`
	Nodes        []string      `json:"nodes"`
	UnknownNodes string        `json:"unknown_nodes"`
	Assumed      []assumedWire `json:"assumed,omitempty"`
	// Detail "brief" asks for the verdicts without their explanations: a sixth of the bytes to decode.
	Detail string `json:"detail,omitempty"`
	// Since asks for a delta answer: the token of the verdicts held for this pod's shape ("" for none).
	Since *string `json:"since,omitempty"`
	// encodedPod is Pod's JSON when it is encoded already (`encodePod`): sent as it is.
	encodedPod json.RawMessage
}

type assumedWire struct {
	Node string  `json:"node"`
	Pod  wirePod `json:"pod"`
	// encoded is Pod's JSON, encoded at Reserve: sent as it is.
	encoded json.RawMessage
}

// appendRequest appends the request's JSON to b: the object encoding/json writes for it, field for field, with the
// pod and the assumed pods sent as encoded already where they are. Written by hand because a cycle's request is
// mostly ~500 node names, which encoding/json would reach through reflection and then scan again (a MarshalJSON's
// output is compacted); here each name is copied between quotes.
func appendRequest(b []byte, r *scoreRequest) ([]byte, error) {
	var err error
	b = append(b, `{"pod":`...)
	if b, err = appendPod(b, r.encodedPod, &r.Pod); err != nil {
		return nil, err
	}
	b = append(b, `,"nodes":`...)
	if r.Nodes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, n := range r.Nodes {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, n)
		}
		b = append(b, ']')
	}
	b = append(b, `,"unknown_nodes":`...)
	b = appendString(b, r.UnknownNodes)
	if len(r.Assumed) > 0 {
		b = append(b, `,"assumed":[`...)
		for i := range r.Assumed {
			a := &r.Assumed[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"node":`...)
			b = appendString(b, a.Node)
			b = append(b, `,"pod":`...)
			if b, err = appendPod(b, a.encoded, &a.Pod); err != nil {
				return nil, err
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendString(b, r.Detail)
	}
	if r.Since != nil {
		b = append(b, `,"since":`...)
		b = appendString(b, *r.Since)
	}
	return append(b, '}'), nil
}

// appendPod appends the pod's JSON: as encoded already, else encoded now.
func appendPod(b []byte, encoded json.RawMessage, pod *wirePod) ([]byte, error) {
	if encoded != nil {
		return append(b, encoded...), nil
	}
	data, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	return append(b, data...), nil
}

// appendString appends s as a JSON string, as encoding/json writes it. Node names, namespaces and tokens are
// printable ASCII with nothing to escape (DNS names, base64): copied between quotes; anything else is left to
// encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			data, _ := json.Marshal(s) // a string always encodes
			return append(b, data...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// nodeVerdict is the advisor's NodeScoreBrief (the part of NodeScoreOut the plugin reads, and whether an
// infeasible node can never host the pod).
type nodeVerdict struct {
	Node         string  `json:"node"`
	Score        float64 `json:"score"`
	Feasible     bool    `json:"feasible"`
	Known        bool    `json:"known"`
	Reason       string  `json:"reason,omitempty"`
	Unresolvable bool    `json:"unresolvable,omitempty"`
}

type scoreResponse struct {
	Scores []nodeVerdict `json:"scores"`
	// AssumedHeld names the assumed pods (namespace/name) the advisor's pod watch already holds.
	AssumedHeld []string `json:"assumed_held"`
	// Token and Delta answer Since: what the verdicts held now are called, and whether Scores holds only the
	// entries changed since the request's token (to merge) rather than every candidate's. Absent from an advisor
	// that does not give delta answers; an empty Token means the pod's shape is not tracked.
	Token *string `json:"token"`
	Delta *bool   `json:"delta"`
}

// advisorClient posts score requests with a timeout.
type advisorClient struct {
	url   string
	token string
	http  *http.Client
	// requestBytes is the size of the last request: the next one's buffer is made that large (plus room), so that
	// encoding ~500 names does not grow it step by step.
	requestBytes atomic.Int64
}

func newAdvisorClient(baseURL, token string, timeout time.Duration) *advisorClient {
	return &advisorClient{
		url:   strings.TrimRight(baseURL, "/") + scorePath,
		token: token,
		http:  &http.Client{Timeout: timeout, Transport: transport()},
	}
}

// requestBufferBytes is the transport's write buffer: a request (headers and ~500 names, ~10 kB) fits whole, so it
// is copied into the buffer and written in one go, where the default 4 kB buffer writes it in pieces and copies
// the rest through a 32 kB buffer allocated for the purpose.
const requestBufferBytes = 64 << 10

// transport is net/http's default transport (proxies from the environment, keep-alive, timeouts) with a write
// buffer that holds a whole request.
func transport() *http.Transport {
	t := &http.Transport{Proxy: http.ProxyFromEnvironment}
	if base, ok := http.DefaultTransport.(*http.Transport); ok {
		t = base.Clone()
	}
	t.WriteBufferSize = requestBufferBytes
	return t
}

// score asks the advisor about the pod on the nodes; any answer but a 200 with the JSON documented is an error.
func (c *advisorClient) score(ctx context.Context, req *scoreRequest) (*scoreResponse, error) {
	size := c.requestBytes.Load()
	body, err := appendRequest(make([]byte, 0, size+size/8+512), req)
	if err != nil {
		return nil, fmt.Errorf("encoding the score request: %w", err)
	}
	c.requestBytes.Store(int64(len(body)))
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		httpReq.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(httpReq)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := readBody(resp)
	if err != nil {
		return nil, fmt.Errorf("reading the advisor's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{code: resp.StatusCode, body: truncate(string(data), 200)}
	}
	var answer scoreResponse
	if err := json.Unmarshal(data, &answer); err != nil {
		return nil, fmt.Errorf("advisor's answer is not a ScoreResponse: %w", err)
	}
	return &answer, nil
}

// readBody reads an answer of at most maxAnswerBytes: at once into a buffer of its length when the advisor says it
// (the keep-alive connection is then free for the next call), else as it comes.
func readBody(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n <= 0 || n > maxAnswerBytes {
		return io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, data); err != nil {
		return nil, err
	}
	return data, nil
}

// statusError is an answer other than a 200: its status says whether the request itself was refused (a 422 to a
// field an older advisor does not know) rather than the advisor failing.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("advisor answered %d: %s", e.code, e.body) }

// refusedAsInvalid says whether err is the advisor's 422: its schema refused the request.
func refusedAsInvalid(err error) bool {
	var s *statusError
	return errors.As(err, &s) && s.code == http.StatusUnprocessableEntity
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// breaker opens after `threshold` consecutive failures: for `open` no call is made (the plugin scores neutrally
// without waiting on a timeout every cycle), then one call tries again; success closes it, failure re-opens it.
type breaker struct {
	mu        sync.Mutex
	threshold int
	open      time.Duration
	now       func() time.Time
	failures  int
	openUntil time.Time
	trial     bool
}

// allow says whether a call may be made now; while open it refuses, once open has passed it lets one trial call
// through at a time.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures < b.threshold {
		return true
	}
	if b.trial || b.now().Before(b.openUntil) {
		return false
	}
	b.trial = true
	return true
}

// success closes the breaker; it says whether the breaker was open (so that its closing is logged once).
func (b *breaker) success() (wasOpen bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasOpen = b.failures >= b.threshold
	b.failures, b.trial = 0, false
	return wasOpen
}

// abandon ends a call that was cut short by its caller (the scheduling cycle ended): it was neither a success nor
// a failure of the advisor, but a trial call of an open breaker is over.
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trial = false
}

// failure counts a failed call; it says whether this failure opened the breaker (not a failed trial of an open one).
func (b *breaker) failure() (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasOpen := b.failures >= b.threshold
	b.failures++
	b.trial = false
	if b.failures >= b.threshold {
		b.openUntil = b.now().Add(b.open)
	}
	return !wasOpen && b.failures >= b.threshold
}
