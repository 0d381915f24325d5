// Command addflag is the binary of a component image made to fail the
// way an operator's bad flag makes it fail (issue 38's rollback): it
// executes the real program beside it, <its own path>.real, under its own
// name with its arguments and one more, the flag in $ADD_FLAG, which the
// real program refuses ("unknown flag") and exits.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "addflag:", err)
		os.Exit(1)
	}
	args := append(append([]string{os.Args[0]}, os.Args[1:]...), os.Getenv("ADD_FLAG"))
	err = syscall.Exec(self+".real", args, os.Environ())
	fmt.Fprintln(os.Stderr, "addflag:", err)
	os.Exit(1)
}
