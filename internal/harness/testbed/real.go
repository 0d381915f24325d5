package testbed

// This file holds what a test of the real control plane (Options.Real) uses to reach it.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
)

// AdminClient is an HTTPS client for the node's apiserver authenticating
// as kubernetes-admin (system:masters), trusting the cluster CA.
func (n *Node) AdminClient() (*http.Client, error) {
	pki := n.State.PKIDir
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, fmt.Errorf("testbed admin cert: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("testbed CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// APIServerURL is the node's apiserver, https://127.0.0.1:<port>.
func (n *Node) APIServerURL() string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.State.Ports.APIServer))
}
