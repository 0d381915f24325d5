package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
)

// DialTimeout bounds connecting to the runtime and each ImageStatus call.
const DialTimeout = 5 * time.Second

// Client asks one runtime about images.
type Client struct {
	svc internalapi.ImageManagerService
	// Source is the endpoint it talks to.
	Source Source
}

// Image is what the runtime says of one image reference.
type Image struct {
	Ref     string
	Present bool
	// ID is the runtime's image ID; Size its size in bytes (0 unknown).
	// Both are set only when Present.
	ID   string
	Size uint64
}

// Dial connects to the runtime at src and checks that it answers the CRI
// v1 image service (ImageFsInfo, as kubelet checks), within timeout. A
// runtime that does not answer is a *NoRuntimeError.
func Dial(src Source, timeout time.Duration) (*Client, error) {
	if path, ok := strings.CutPrefix(src.Endpoint, "unix://"); ok {
		if _, err := os.Stat(path); err != nil {
			return nil, &NoRuntimeError{Tried: []string{fmt.Sprintf("%s: %v", src, err)}}
		}
	}
	svc, err := criclient.NewRemoteImageService(src.Endpoint, timeout, nil, nil)
	if err != nil {
		return nil, &NoRuntimeError{Tried: []string{fmt.Sprintf("%s: %v", src, err)}}
	}
	return &Client{svc: svc, Source: src}, nil
}

// Open is Resolve then Dial.
func Open(explicit string, ps Processes, kubeletConfig string) (*Client, error) {
	src, err := Resolve(explicit, ps, kubeletConfig)
	if err != nil {
		return nil, err
	}
	return Dial(src, DialTimeout)
}

// Status asks the runtime whether ref is present (CRI ImageStatus).
func (c *Client) Status(ctx context.Context, ref string) (Image, error) {
	resp, err := c.svc.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil {
		return Image{Ref: ref}, fmt.Errorf("image status of %s from %s: %s", ref, c.Source.Endpoint, reason(err))
	}
	if resp.GetImage() == nil {
		return Image{Ref: ref}, nil
	}
	return Image{Ref: ref, Present: true, ID: resp.Image.Id, Size: resp.Image.Size}, nil
}

// ErrPull is wrapped by every *PullError.
var ErrPull = errors.New("image pull failed")

// PullError is a pull the runtime refused or failed: the image and the
// runtime's own reason.
type PullError struct {
	Ref, Endpoint string
	// Reason is the runtime's message (the registry's answer, a network
	// error), without gRPC's wrapping.
	Reason string
}

func (e *PullError) Error() string {
	return fmt.Sprintf("pulling %s through %s failed: %s", e.Ref, e.Endpoint, e.Reason)
}

// Unwrap makes errors.Is(err, ErrPull) hold.
func (e *PullError) Unwrap() error { return ErrPull }

// Pull pulls ref through the runtime (CRI PullImage, with the runtime's
// own registry configuration and no credentials of ours), then asks for
// its status to learn its size. ctx bounds the pull.
func (c *Client) Pull(ctx context.Context, ref string) (Image, error) {
	if _, err := c.svc.PullImage(ctx, &runtimeapi.ImageSpec{Image: ref}, nil, nil); err != nil {
		return Image{Ref: ref}, &PullError{Ref: ref, Endpoint: c.Source.Endpoint, Reason: reason(err)}
	}
	img, err := c.Status(ctx, ref)
	if err != nil {
		return img, err
	}
	if !img.Present {
		return img, &PullError{Ref: ref, Endpoint: c.Source.Endpoint, Reason: "the runtime reported the pull done but has no such image afterwards"}
	}
	return img, nil
}

// reason is the runtime's message in a gRPC error.
func reason(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
