package versions

// This file holds what of etcd's static pod depends on etcd's minor: the
// flags whose names changed and the probe paths.

import (
	"k8s.io/apimachinery/pkg/util/version"
)

// EtcdForm is the version-dependent part of etcd's static pod: the flags
// that name the same setting differently per minor, and the probe paths on
// the metrics listener (kubeadm's, cmd/kubeadm/app/phases/etcd/local.go).
type EtcdForm struct {
	// Flags are the version-dependent flags, name without dashes -> value.
	Flags map[string]string
	// Liveness, Readiness and Startup are probe paths; Readiness "" means
	// no readiness probe.
	Liveness, Readiness, Startup string
}

var (
	v36 = version.MajorMinor(3, 6)
)

// Etcd is the version-dependent form of etcd v's static pod:
//
//   - 3.5 knows only the --experimental-* names and has no --feature-gates;
//     its /health endpoint takes the serializable and exclude parameters.
//   - 3.6 made the experimental flags plain flags or feature gates
//     (server/embed/config.go experimentalFlagMigrationMap), refuses an old
//     and a new form together, and serves /livez and /readyz.
//   - 3.7 removed every --experimental-* flag; it is rendered as 3.6.
//
// The settings are kubeadm's: the initial corruption check on, watch
// progress notifications every 5 s.
func Etcd(v *version.Version) EtcdForm {
	if v.LessThan(v36) {
		return EtcdForm{
			Flags: map[string]string{
				"experimental-initial-corrupt-check":          "true",
				"experimental-watch-progress-notify-interval": "5s",
			},
			Liveness: "/health?exclude=NOSPACE&serializable=true",
			Startup:  "/health?serializable=false",
		}
	}
	return EtcdForm{
		Flags: map[string]string{
			"feature-gates":                  "InitialCorruptCheck=true",
			"watch-progress-notify-interval": "5s",
		},
		Liveness:  "/livez",
		Readiness: "/readyz",
		Startup:   "/readyz",
	}
}
