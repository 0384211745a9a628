package gpuadvisor

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeArgsDefaults(t *testing.T) {
	for _, obj := range []runtime.Object{nil, &runtime.Unknown{Raw: []byte(`{}`)}} {
		args, err := decodeArgs(obj)
		if err != nil {
			t.Fatalf("decodeArgs(%v): %v", obj, err)
		}
		if args.AdvisorURL != DefaultAdvisorURL || args.Timeout.Duration != DefaultTimeout ||
			args.FailureThreshold != DefaultFailureThreshold || args.OpenDuration.Duration != DefaultOpenDuration ||
			args.AssumeTTL.Duration != DefaultAssumeTTL || args.Filter {
			t.Errorf("decodeArgs(%v) = %+v, want every default", obj, args)
		}
	}
}

func TestDecodeArgsFromProfile(t *testing.T) {
	raw := []byte("advisorURL: http://advisor:8080\ntimeout: 150ms\nfailureThreshold: 5\nopenDuration: 1m\nfilter: true\n")
	args, err := decodeArgs(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeYAML})
	if err != nil {
		t.Fatal(err)
	}
	if args.AdvisorURL != "http://advisor:8080" || args.Timeout.Duration != 150*time.Millisecond ||
		args.FailureThreshold != 5 || args.OpenDuration.Duration != time.Minute || !args.Filter {
		t.Errorf("decodeArgs = %+v", args)
	}
	if args.AssumeTTL.Duration != DefaultAssumeTTL {
		t.Errorf("assumeTTL not defaulted: %s", args.AssumeTTL.Duration)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := map[string]Args{
		"advisorURL":       {AdvisorURL: "advisor:8080"},
		"timeout":          {Timeout: metav1.Duration{Duration: 2 * time.Minute}},
		"failureThreshold": {FailureThreshold: -1},
		"openDuration":     {OpenDuration: metav1.Duration{Duration: -time.Second}},
		"assumeTTL":        {AssumeTTL: metav1.Duration{Duration: -time.Second}},
	}
	for field, args := range cases {
		SetDefaults(&args)
		err := Validate(&args)
		if err == nil || !strings.HasPrefix(err.Error(), field+":") {
			t.Errorf("Validate(%+v) = %v, want an error about %s", args, err, field)
		}
	}
	ok := Args{}
	SetDefaults(&ok)
	if err := Validate(&ok); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

func TestDecodeArgsRefusesUnknownContent(t *testing.T) {
	if _, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"timeout": "soon"}`)}); err == nil {
		t.Error("a timeout that is not a duration was accepted")
	}
}

func TestDecodeArgsRefusesAMisspeltField(t *testing.T) {
	for _, obj := range []*runtime.Unknown{
		{Raw: []byte(`{"filtre": true}`), ContentType: runtime.ContentTypeJSON},
		{Raw: []byte("timeout: 100ms\nfiltre: true\n"), ContentType: runtime.ContentTypeYAML},
	} {
		_, err := decodeArgs(obj)
		if err == nil || !strings.Contains(err.Error(), `unknown field "filtre"`) {
			t.Errorf("decodeArgs(%s) = %v, want an error naming the unknown field", obj.Raw, err)
		}
	}
	if _, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"apiVersion": "v1", "kind": "GPUAdvisorArgs"}`)}); err != nil {
		t.Errorf("type meta refused: %v", err)
	}
}
