package cli

// Defaults an operator sets once: the config file and the STRATUM_<FLAG>
// environment variables. Precedence: a flag on the command line, then the
// environment, then the config file, then the built-in default.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// DefaultConfigFile is the config file read when STRATUM_CONFIG is unset.
const DefaultConfigFile = "/etc/stratum/upgrade.yaml"

// configEnv names another config file; set and empty, no file is read.
const configEnv = "STRATUM_CONFIG"

// configKeys are the flags the config file and the environment may set:
// every global and transaction flag but the hidden test seam and
// --etcd-members, a count the operator states on the command line for one
// command (a default would outlive the cluster it was true of).
var configKeys = func() []string {
	var keys []string
	for _, k := range append(slices.Clone(globalFlags), txnFlags...) {
		if k != "proc-scope" && k != "etcd-members" {
			keys = append(keys, k)
		}
	}
	return keys
}()

// envName is the environment variable of flag: STRATUM_STATE_DIR for
// state-dir.
func envName(flag string) string {
	return "STRATUM_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// config is a parsed config file: each key with its value as a flag
// value.
type config struct {
	path   string
	values map[string]string
}

// loadConfig reads the config file: $STRATUM_CONFIG, or DefaultConfigFile
// when it is unset. The default file may be absent; a file named by
// STRATUM_CONFIG must exist. An unknown key, a value that is a list or a
// map, or a file that is not a YAML mapping is a usage error naming the
// file and the key.
func loadConfig(lookupEnv func(string) (string, bool)) (*config, error) {
	path, named := lookupEnv(configEnv)
	switch {
	case !named:
		path = DefaultConfigFile
	case path == "":
		return &config{values: map[string]string{}}, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !named {
		return &config{path: path, values: map[string]string{}}, nil
	}
	if err != nil {
		if named {
			return nil, usagef("config file %s (%s): %w", path, configEnv, rootCause(err))
		}
		return nil, fmt.Errorf("config file %s: %w", path, rootCause(err))
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, usagef("config file %s: not a YAML mapping of flag names to values: %w", path, err)
	}
	c := &config{path: path, values: map[string]string{}}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(configKeys, k) {
			return nil, usagef("config file %s: unknown key %q (the keys are the flags' names: %s)", path, k, strings.Join(configKeys, ", "))
		}
		switch v := raw[k].(type) {
		case string:
			c.values[k] = v
		case float64, bool:
			c.values[k] = fmt.Sprint(v)
		case nil:
			return nil, usagef("config file %s: %s has no value", path, k)
		default:
			return nil, usagef("config file %s: %s: want a single value, not %T", path, k, v)
		}
	}
	return c, nil
}

// applyConfig sets every flag the command uses (uses) and the command
// line left unset from its STRATUM_<FLAG> environment variable (an empty
// one counts as unset), or else from the config file. A value the flag
// refuses is a usage error naming where it came from; a key the command
// does not use is not looked at. With lenient (the boot step before
// kubelet, which must not fail on a file it could do without), a config
// file that cannot be read or parsed is a warning, and the environment
// and the defaults apply.
func (g *globals) applyConfig(lookupEnv func(string) (string, bool), uses func(string) bool, lenient bool) error {
	c, err := loadConfig(lookupEnv)
	if err != nil && lenient {
		fmt.Fprintf(g.stderr, "stratum-upgrade: warning: %v; going on without it\n", err)
		c, err = &config{values: map[string]string{}}, nil
	}
	if err != nil {
		return err
	}
	g.cfg = c
	g.origin = map[string]string{}
	if g.flags == nil {
		return nil
	}
	for _, k := range configKeys {
		f := g.flags.Lookup(k)
		if f == nil || f.Changed || !uses(k) {
			continue
		}
		if v, ok := lookupEnv(envName(k)); ok && v != "" {
			if err := f.Value.Set(v); err != nil {
				return cmdLineErrorf("%s=%q: invalid value for --%s: %v", envName(k), v, k, err)
			}
			g.origin[k] = envName(k)
			continue
		}
		if v, ok := c.values[k]; ok {
			if err := f.Value.Set(v); err != nil {
				return usagef("config file %s: %s: %q: invalid value for --%s: %v", c.path, k, v, k, err)
			}
			g.origin[k] = k + " in " + c.path
		}
	}
	return nil
}

// from says where the value of flag ("--soak") came from when not the
// command line or the default: " (set by STRATUM_SOAK)".
func (g *globals) from(flag string) string {
	if o := g.origin[strings.TrimPrefix(flag, "--")]; o != "" {
		return " (set by " + o + ")"
	}
	return ""
}
