package nodestate

import (
	"reflect"
	"strings"
	"testing"
)

// A flag given more than once is one extra arg whose value is a list, in
// command-line order; one value stays a plain string, as every node state
// file written before has it. extraArgsOrder places the values: a flag
// listed once has its values together there, a flag listed once per value
// takes the next value at each place. Parse, Marshal and Parse again give
// the same state and the same command line.
func TestExtraArgsRepeatedRoundTrip(t *testing.T) {
	const issuers = "    service-account-issuer:\n    - https://issuer.example.com\n    - https://kubernetes.default.svc.cluster.local\n"
	cases := []struct {
		name, extra string
		want        []Arg  // ExtraArgList(kube-apiserver)
		written     string // in Marshal's output
	}{
		{"one value, as before", "extraArgs:\n  kube-apiserver:\n    event-ttl: 2h\n",
			[]Arg{{"event-ttl", "2h"}}, "    event-ttl: 2h\n"},
		{"an unquoted number, as before", "extraArgs:\n  kube-apiserver:\n    v: 3\n",
			[]Arg{{"v", "3"}}, "    v: \"3\"\n"},
		{"null is the empty value, as before", "extraArgs:\n  kube-apiserver:\n    v: null\n",
			[]Arg{{"v", ""}}, "    v: \"\"\n"},
		{"a list of one is one value", "extraArgs:\n  kube-apiserver:\n    event-ttl: [2h]\n",
			[]Arg{{"event-ttl", "2h"}}, "    event-ttl: 2h\n"},
		{"two values, in order", "extraArgs:\n  kube-apiserver:\n" + issuers,
			[]Arg{{"service-account-issuer", "https://issuer.example.com"}, {"service-account-issuer", "https://kubernetes.default.svc.cluster.local"}},
			issuers},
		{"listed once: the values together", "extraArgs:\n  kube-apiserver:\n    v: \"2\"\n" + issuers +
			"extraArgsOrder:\n  kube-apiserver:\n  - service-account-issuer\n  - v\n",
			[]Arg{{"service-account-issuer", "https://issuer.example.com"}, {"service-account-issuer", "https://kubernetes.default.svc.cluster.local"}, {"v", "2"}},
			issuers},
		{"listed once per value: apart", "extraArgs:\n  kube-apiserver:\n    v: \"2\"\n" + issuers +
			"extraArgsOrder:\n  kube-apiserver:\n  - service-account-issuer\n  - v\n  - service-account-issuer\n",
			[]Arg{{"service-account-issuer", "https://issuer.example.com"}, {"v", "2"}, {"service-account-issuer", "https://kubernetes.default.svc.cluster.local"}},
			"  - service-account-issuer\n  - v\n  - service-account-issuer\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Parse([]byte(valid + tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.ExtraArgList(KubeAPIServer); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ExtraArgList = %v, want %v", got, tc.want)
			}
			out, err := st.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tc.written) {
				t.Errorf("Marshal wrote\n%s\nwant it to hold\n%s", out, tc.written)
			}
			again, err := Parse(out)
			if err != nil {
				t.Fatalf("Parse of Marshal's output: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(again, st) || !reflect.DeepEqual(st.Clone(), st) {
				t.Errorf("round trip changed the state:\n%+v\n%+v", st.ExtraArgs, again.ExtraArgs)
			}
		})
	}
}

func TestExtraArgsRepeatedRefused(t *testing.T) {
	cases := []struct{ name, extra, want string }{
		{"an empty list", "extraArgs:\n  kube-apiserver:\n    v: []\n", "extraArgs.kube-apiserver.v: an empty list"},
		{"a list of lists", "extraArgs:\n  kube-apiserver:\n    v: [[a]]\n", "extraArgs.kube-apiserver.v[]: want a single value, got a list"},
		{"a mapping", "extraArgs:\n  kube-apiserver:\n    v: {a: b}\n", "extraArgs.kube-apiserver.v: want a value or a list of values, got a mapping"},
		{"one value listed twice", "extraArgs:\n  kube-apiserver:\n    v: \"2\"\nextraArgsOrder:\n  kube-apiserver: [v, v]\n",
			`extraArgsOrder.kube-apiserver[1]: "v" is listed 2 times; it has 1 value`},
		{"two values listed three times", "extraArgs:\n  kube-apiserver:\n    v: [\"1\", \"2\"]\nextraArgsOrder:\n  kube-apiserver: [v, v, v]\n",
			`extraArgsOrder.kube-apiserver[1]: "v" is listed 3 times; it has 2 values`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(valid + tc.extra))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v\nwant an error with %q", err, tc.want)
			}
		})
	}
}
