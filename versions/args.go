package versions

// This file checks a component's final flag set against what its binary
// at a given version accepts.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// FlagError is a flag the component's binary at Version would refuse.
type FlagError struct {
	Component string
	Version   *version.Version
	Flag      string
	Reason    string
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("--%s: %s %s %s", e.Flag, e.Component, e.Version, e.Reason)
}

// CheckArgs returns a *FlagError for the first flag (by name) of args,
// component's final flag set at v, that the binary would refuse to start
// with: a flag it does not have (the embedded tables of
// versions/flags, when there is one for v's minor), or on etcd 3.6 an
// experimental flag set beside its new name or feature gate, which etcd
// 3.6 refuses.
func CheckArgs(component string, v *version.Version, args map[string]string) error {
	known := acceptedFlags(component, v)
	for _, name := range slices.Sorted(maps.Keys(args)) {
		if known != nil && !known[name] {
			return &FlagError{Component: component, Version: v, Flag: name, Reason: "has no such flag" + hint(component, v, name)}
		}
	}
	if component == nodestate.Etcd && !v.LessThan(v36) {
		return checkEtcdBothForms(v, args)
	}
	return nil
}

// hint says what to use instead of an etcd flag removed or renamed in v.
func hint(component string, v *version.Version, name string) string {
	if component != nodestate.Etcd {
		return ""
	}
	old, ok := strings.CutPrefix(name, "experimental-")
	if !ok {
		return ""
	}
	if gate, ok := etcdFlagToGate[old]; ok {
		return fmt.Sprintf(" (etcd 3.6 moved it to --feature-gates=%s=true)", gate)
	}
	if etcdRenamed[old] {
		return fmt.Sprintf(" (etcd 3.6 renamed it --%s)", old)
	}
	return " (etcd 3.7 removed every --experimental-* flag)"
}

// checkEtcdBothForms refuses what etcd 3.6's config validation refuses:
// an --experimental-* flag together with its new name or its feature gate
// (server/embed/config.go).
func checkEtcdBothForms(v *version.Version, args map[string]string) error {
	gates := map[string]bool{}
	for _, g := range strings.Split(args["feature-gates"], ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(g), "=")
		gates[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(args)) {
		old, ok := strings.CutPrefix(name, "experimental-")
		if !ok {
			continue
		}
		if _, both := args[old]; both && etcdRenamed[old] {
			return &FlagError{Component: nodestate.Etcd, Version: v, Flag: name, Reason: fmt.Sprintf("refuses it together with --%s, its new name: set only --%s", old, old)}
		}
		if gate, ok := etcdFlagToGate[old]; ok && gates[gate] {
			return &FlagError{Component: nodestate.Etcd, Version: v, Flag: name, Reason: fmt.Sprintf("refuses it together with its feature gate %s in --feature-gates: set only the gate", gate)}
		}
	}
	return nil
}

// etcdFlagToGate is etcd 3.6's ExperimentalFlagToFeatureMap
// (server/features/etcd_features.go): experimental flags, prefix dropped,
// that became feature gates.
var etcdFlagToGate = map[string]string{
	"initial-corrupt-check":             "InitialCorruptCheck",
	"compact-hash-check-enabled":        "CompactHashCheck",
	"stop-grpc-service-on-defrag":       "StopGRPCServiceOnDefrag",
	"txn-mode-write-with-shared-buffer": "TxnModeWriteWithSharedBuffer",
	"enable-lease-checkpoint":           "LeaseCheckpoint",
	"enable-lease-checkpoint-persist":   "LeaseCheckpointPersist",
}

// etcdRenamed are etcd 3.6's experimental flags that kept their name
// without the prefix (server/embed/config.go experimentalFlagMigrationMap).
var etcdRenamed = map[string]bool{
	"watch-progress-notify-interval":       true,
	"corrupt-check-time":                   true,
	"compact-hash-check-time":              true,
	"compaction-batch-limit":               true,
	"compaction-sleep-interval":            true,
	"warning-apply-duration":               true,
	"bootstrap-defrag-threshold-megabytes": true,
	"memory-mlock":                         true,
	"snapshot-catchup-entries":             true,
	"downgrade-check-time":                 true,
	"peer-skip-client-san-verification":    true,
	"max-learners":                         true,
	"warning-unary-request-duration":       true,
	"distributed-tracing-address":          true,
	"distributed-tracing-instance-id":      true,
	"distributed-tracing-sampling-rate":    true,
	"distributed-tracing-service-name":     true,
	"enable-distributed-tracing":           true,
}
