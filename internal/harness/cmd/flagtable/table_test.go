package main

import (
	"slices"
	"testing"
)

func TestParseHelp(t *testing.T) {
	etcd := "Usage:\n\n  etcd [flags]\n\nMember:\n  --name 'default'\n    Human-readable name for this member.\n" +
		"  --data-dir '${name}.etcd'\n    Path to the data directory.\n  --experimental-initial-corrupt-check 'false'\n" +
		"    Enable to check data corruption; see --name too.\n  --log-outputs 'default'\n"
	if got, want := parseHelp(etcd), []string{"data-dir", "experimental-initial-corrupt-check", "log-outputs", "name"}; !slices.Equal(got, want) {
		t.Errorf("etcd help: %v, want %v", got, want)
	}
	kube := "Generic flags:\n\n      --bind-address ip                        The IP address on which to listen for the --secure-port port.\n" +
		"                                               Format: '--emulated-version=wardle=1.2'.\n" +
		"      --feature-gates colonSeparatedMultimapStringString   A set of key=value pairs\n" +
		"  -h, --help                                   help for kube-scheduler\n" +
		"  -v, --v Level                                number for the log level verbosity\n      --version version[=true]   Print version\n"
	if got, want := parseHelp(kube), []string{"bind-address", "feature-gates", "help", "v", "version"}; !slices.Equal(got, want) {
		t.Errorf("kube help: %v, want %v", got, want)
	}
}
