package gpuadvisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Defaults of Args, chosen for one advisor replica answering a few hundred candidate nodes in milliseconds.
const (
	// DefaultAdvisorURL is the advisor's Service in the namespace deploy/ installs into.
	DefaultAdvisorURL = "http://gpuadvisor-advisor.gpuadvisor.svc:8080"
	// DefaultTimeout bounds one /v1/score call, as the extender profile's httpTimeout does.
	DefaultTimeout = 300 * time.Millisecond
	// DefaultFailureThreshold consecutive failed calls open the circuit.
	DefaultFailureThreshold = 3
	// DefaultOpenDuration is how long an open circuit scores neutrally before one call tries the advisor again.
	DefaultOpenDuration = 30 * time.Second
	// DefaultAssumeTTL is how long a reserved pod is sent to the advisor as assumed: long enough for the advisor's
	// pod watch to see it bound.
	DefaultAssumeTTL = 30 * time.Second
)

// Args are the plugin's arguments in a KubeSchedulerConfiguration profile (`pluginConfig: [{name: GPUAdvisor,
// args: {...}}]`). Zero values take the defaults above.
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// AdvisorURL is the advisor's base URL; the plugin posts to AdvisorURL + "/v1/score".
	AdvisorURL string `json:"advisorURL,omitempty"`
	// Timeout bounds one call to the advisor; a slower answer scores the cycle neutrally.
	Timeout metav1.Duration `json:"timeout,omitempty"`
	// FailureThreshold consecutive failures open the circuit breaker: no call for OpenDuration.
	FailureThreshold int `json:"failureThreshold,omitempty"`
	// OpenDuration is how long the circuit stays open before one call tries the advisor again.
	OpenDuration metav1.Duration `json:"openDuration,omitempty"`
	// AssumeTTL is how long a reserved pod is sent with score requests as assumed on its node.
	AssumeTTL metav1.Duration `json:"assumeTTL,omitempty"`
	// TokenFile, when set, holds a bearer token sent with every call (read once at start).
	TokenFile string `json:"tokenFile,omitempty"`
	// Filter moves the cycle's one call to PreFilter, for every node, and lets Filter refuse the nodes the advisor
	// says the pod does not fit (the profile must enable the plugin at preFilter and filter too). Off by default:
	// the call then covers every node of the cluster, not only those that passed the other filters.
	Filter bool `json:"filter,omitempty"`
}

// SetDefaults fills the zero fields of args.
func SetDefaults(args *Args) {
	if args.AdvisorURL == "" {
		args.AdvisorURL = DefaultAdvisorURL
	}
	if args.Timeout.Duration == 0 {
		args.Timeout.Duration = DefaultTimeout
	}
	if args.FailureThreshold == 0 {
		args.FailureThreshold = DefaultFailureThreshold
	}
	if args.OpenDuration.Duration == 0 {
		args.OpenDuration.Duration = DefaultOpenDuration
	}
	if args.AssumeTTL.Duration == 0 {
		args.AssumeTTL.Duration = DefaultAssumeTTL
	}
}

// Validate says what is wrong with defaulted args, naming the field.
func Validate(args *Args) error {
	u, err := url.Parse(args.AdvisorURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("advisorURL: want an http(s) URL with a host, got %q", args.AdvisorURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("advisorURL: want a base URL without query or fragment, got %q", args.AdvisorURL)
	}
	if args.Timeout.Duration < 0 || args.Timeout.Duration > time.Minute {
		return fmt.Errorf("timeout: want within 0s..1m (0: the default %s), got %s", DefaultTimeout, args.Timeout.Duration)
	}
	if args.FailureThreshold < 0 {
		return fmt.Errorf("failureThreshold: want >= 1 (0: the default %d), got %d", DefaultFailureThreshold, args.FailureThreshold)
	}
	if args.OpenDuration.Duration < 0 {
		return fmt.Errorf("openDuration: want >= 0s, got %s", args.OpenDuration.Duration)
	}
	if args.AssumeTTL.Duration < 0 {
		return fmt.Errorf("assumeTTL: want >= 0s, got %s", args.AssumeTTL.Duration)
	}
	return nil
}

// decodeArgs reads the profile's args (nil: all defaults), defaults and validates them. Unlike the framework's
// DecodeInto it refuses a field it does not know, so that a misspelt arg is an error, not a default.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	if obj != nil {
		unknown, ok := obj.(*runtime.Unknown)
		if !ok {
			return nil, fmt.Errorf("%s args: want runtime.Unknown, got %T", Name, obj)
		}
		if len(unknown.Raw) > 0 {
			raw, err := utilyaml.ToJSON(unknown.Raw)
			if err != nil {
				return nil, fmt.Errorf("%s args: %w", Name, err)
			}
			decoder := json.NewDecoder(bytes.NewReader(raw))
			decoder.DisallowUnknownFields()
			if err := decoder.Decode(args); err != nil {
				return nil, fmt.Errorf("%s args: %w", Name, err)
			}
		}
	}
	SetDefaults(args)
	if err := Validate(args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return args, nil
}
