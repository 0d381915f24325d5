package nodestate

// Where a component's image comes from: its pin in images, or kubeadm's
// image in the node's imageRepository. Naming kubeadm's image takes
// kubeadm's table: package resolve does it (resolve.Image).

import "regexp"

// DefaultImageRepository is kubeadm's default image repository, used when
// the node state names none.
const DefaultImageRepository = "registry.k8s.io"

// repositoryRef is an image repository: a registry host (with a port) and
// a path, no tag, no digest.
var repositoryRef = regexp.MustCompile(`^[a-z0-9]+([._:-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// IsRepository reports whether s is an image repository imageRepository
// may name.
func IsRepository(s string) bool { return repositoryRef.MatchString(s) }

// Repository is the node's image repository: imageRepository, or
// DefaultImageRepository when it is empty.
func (st *NodeState) Repository() string {
	if st.ImageRepository != "" {
		return st.ImageRepository
	}
	return DefaultImageRepository
}

// Pinned reports whether images pins component's image.
func (st *NodeState) Pinned(component string) bool { return st.Images[component] != "" }

// validateImages checks imageRepository and every pin of the roster's
// components; kube-vip, which kubeadm has no image of, must be pinned.
// That kubeadm's table names etcd's image is resolve.Validate's check.
func (st *NodeState) validateImages(roster []string, bad func(field, format string, a ...any)) {
	if st.ImageRepository != "" && !IsRepository(st.ImageRepository) {
		bad("imageRepository", "must be an image repository without tag or digest, like registry.k8s.io or mirror.example.com:5000/k8s, got %q", st.ImageRepository)
		return
	}
	for _, c := range roster {
		img, pinned := st.Images[c]
		switch {
		case pinned && img == "":
			bad("images."+c, "empty: pin an image reference, or leave %s out to run it from imageRepository", c)
		case pinned && !imageRef.MatchString(img):
			bad("images."+c, "not an image reference: %q", img)
		case pinned:
		case c == KubeVIP:
			bad("images."+c, "required: the node runs kube-vip, which kubeadm has no image of")
		}
	}
}
