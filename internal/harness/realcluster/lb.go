package realcluster

// The control-plane endpoint: a TCP load balancer on BridgeAddress:6443,
// as an operator puts in front of an HA control plane, passing each
// connection to the first member (in turn) that accepts it. kubeadm's
// controlPlaneEndpoint names it, so no node's address is the cluster's.

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// APIPort is the API servers' port, and the load balancer's.
const APIPort = 6443

// Endpoint is the control-plane endpoint (the load balancer).
var Endpoint = fmt.Sprintf("%s:%d", BridgeAddress, APIPort)

type balancer struct {
	l       net.Listener
	mu      sync.Mutex
	members []string
	next    int
	wg      sync.WaitGroup
}

func startBalancer() (*balancer, error) {
	l, err := net.Listen("tcp", Endpoint)
	if err != nil {
		return nil, fmt.Errorf("real cluster: load balancer: %w", err)
	}
	b := &balancer{l: l}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// add makes addr (host:port) a member.
func (b *balancer) add(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members = append(b.members, addr)
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.l.Accept()
		if err != nil {
			return
		}
		go b.pass(c)
	}
}

// pass connects c to a member that accepts, trying each once.
func (b *balancer) pass(c net.Conn) {
	defer c.Close()
	b.mu.Lock()
	members := append([]string(nil), b.members...)
	start := b.next
	b.next++
	b.mu.Unlock()
	for i := range members {
		up, err := net.DialTimeout("tcp", members[(start+i)%len(members)], time.Second)
		if err != nil {
			continue
		}
		defer up.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
		go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
		<-done
		return
	}
}

func (b *balancer) close() {
	b.l.Close()
	b.wg.Wait()
}
