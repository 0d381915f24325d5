package kubeapi

// The version of the kubelet running on this node, as its Node reports
// it: the live source of engine's StaticPodKubelet check, which reads each
// manifest by the rules of the kubelet that reads it as soon as it is
// written (still the old one while the control plane is upgraded).

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoKubeletVersion: the Node reports no kubelet version (a Node whose
// kubelet never posted its status).
var ErrNoKubeletVersion = errors.New("the Node reports no kubelet version")

// KubeletVersion is the version ("v1.34.4") of the kubelet on ref's Node,
// from its status.nodeInfo.kubeletVersion. An error wrapping ErrUnanswered
// is the API server not answering; any other error is its answer, or a
// Node with no version (ErrNoKubeletVersion).
func KubeletVersion(ctx context.Context, cs API, ref NodeRef) (string, error) {
	node, err := FindNode(ctx, cs, ref)
	if err != nil {
		if transient(err) {
			return "", fmt.Errorf("%w: %w", ErrUnanswered, err)
		}
		return "", err
	}
	v := node.Status.NodeInfo.KubeletVersion
	if v == "" {
		return "", fmt.Errorf("%w: Node %s", ErrNoKubeletVersion, node.Name)
	}
	return v, nil
}
