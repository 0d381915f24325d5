// Command flagdump prints every long flag a Kubernetes control-plane
// binary of this module's version accepts, hidden and deprecated ones
// included: pflag leaves those out of --help, yet the binary parses them.
// It builds each component's cobra command as the binary's main does and
// adds what component-base/cli.Run adds at run time (the logging flags,
// cobra's --help), then visits the whole flag set. The tables of
// versions/flags come from it (internal/harness/cmd/flagtable).
//
//	flagdump --version                   Kubernetes vX.Y.Z of this module (from -ldflags, as the binaries)
//	flagdump [-annotate] kube-apiserver  one flag per line, sorted; -annotate adds why --help hides it
//	flagdump -features                   every feature gate with its lifecycle (features.go)
package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register" // as the binaries' mains: the JSON log format
	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// commands are the components, each built on demand: building one has
// side effects (kube-apiserver's sets up the signal handler, once).
var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println("Kubernetes " + version.Get().GitVersion)
		return
	}
	if len(args) == 1 && args[0] == "-features" {
		for _, line := range featureLines() {
			fmt.Println(line)
		}
		return
	}
	annotate := len(args) == 2 && args[0] == "-annotate"
	if annotate {
		args = args[1:]
	}
	newCmd, ok := commands[firstOr(args)]
	if len(args) != 1 || !ok {
		fmt.Fprintln(os.Stderr, "usage: flagdump --version | flagdump -features | flagdump [-annotate] kube-apiserver|kube-controller-manager|kube-scheduler")
		os.Exit(2)
	}
	for _, line := range flags(newCmd(), annotate) {
		fmt.Println(line)
	}
}

// flags are cmd's long flag names, sorted, as the binary would parse them.
func flags(cmd *cobra.Command, annotate bool) []string {
	// What component-base/cli.Run does before Execute, then what cobra
	// adds in Execute.
	cmd.SetGlobalNormalizationFunc(cliflag.WordSepNormalizeFunc)
	logs.AddFlags(cmd.PersistentFlags())
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()

	seen := map[string]string{}
	visit := func(f *pflag.Flag) {
		note := ""
		switch {
		case f.Deprecated != "":
			note = "\tdeprecated: " + f.Deprecated
		case f.Hidden:
			note = "\thidden"
		}
		seen[f.Name] = note
	}
	cmd.Flags().VisitAll(visit)
	cmd.PersistentFlags().VisitAll(visit)
	out := make([]string, 0, len(seen))
	for name, note := range seen {
		if annotate {
			name += note
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func firstOr(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}
