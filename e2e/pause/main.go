// Command pause is the sandbox ("pause") container of the end-to-end tests'
// containerd: it holds a pod's namespaces open and does nothing else. As the
// PID 1 of its PID namespace it reaps every child reparented to it and exits
// 0 on SIGTERM or SIGINT, like registry.k8s.io/pause; given -v it prints its
// version and exits 0, as pause does (kubeadm's upgrade health-check Job
// runs the pause image that way). It must be built with
// CGO_ENABLED=0: the image holds this one static binary and nothing else.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause.go version stratum-e2e")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
