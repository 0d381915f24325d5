package nodestate

import (
	"fmt"
	"net"
	"strings"
)

// validCIDRs checks a Service or pod range as kube-apiserver's
// --service-cluster-ip-range and kube-controller-manager's --cluster-cidr
// take it, and as kubeadm writes a dual-stack cluster's
// (networking.serviceSubnet: 10.96.0.0/12,fd00:10:96::/112): one CIDR, or
// two separated by a comma, one of each IP family.
func validCIDRs(s string) error {
	parts := strings.Split(s, ",")
	if len(parts) > 2 {
		return fmt.Errorf("at most two CIDRs (one IPv4, one IPv6), got %d", len(parts))
	}
	v6 := 0
	for _, p := range parts {
		ip, _, err := net.ParseCIDR(p)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR", p)
		}
		if ip.To4() == nil {
			v6++
		}
	}
	if len(parts) == 2 && v6 != 1 {
		return fmt.Errorf("two CIDRs must be one IPv4 and one IPv6 (dual-stack)")
	}
	return nil
}
