package versions

// This file reads the embedded flag tables: the flags each component's
// binary accepts at each minor: etcd's as its --help lists them (deprecated
// flags included), each Kubernetes component's whole flag set, hidden and
// deprecated flags included (its flagdump program).

import (
	"embed"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/version"
)

// flagFS holds flags/<component>-<minor>.txt, generated from the real
// binaries by internal/harness/cmd/flagtable (make flag-tables): one flag
// name per line, lines starting with # are comments.
//
//go:embed flags
var flagFS embed.FS

var (
	tablesOnce sync.Once
	tables     map[string]map[string]bool // "<component>-<minor>" -> flags
)

// acceptedFlags is the set of flags component's binary at v's minor
// accepts, nil when no table covers that minor (then nothing is refused).
func acceptedFlags(component string, v *version.Version) map[string]bool {
	tablesOnce.Do(loadTables)
	return tables[component+"-"+MinorOf(v)]
}

func loadTables() {
	tables = map[string]map[string]bool{}
	entries, err := flagFS.ReadDir("flags")
	if err != nil {
		return
	}
	for _, e := range entries {
		key, ok := strings.CutSuffix(e.Name(), ".txt")
		if !ok {
			continue
		}
		b, err := flagFS.ReadFile("flags/" + e.Name())
		if err != nil {
			continue
		}
		set := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line != "" && !strings.HasPrefix(line, "#") {
				set[line] = true
			}
		}
		tables[key] = set
	}
}
