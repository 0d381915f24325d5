// Command push copies one image of a docker-archive (docker save's
// format, as e2e.CachedArchive writes it) to a registry over plain HTTP,
// with go-containerregistry: the end-to-end tests' way to put images in
// their loopback registry without the container runtime seeing them.
//
//	push -archive images.tar -from REF -to 127.0.0.1:PORT/REPO:TAG
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Version is what -version prints: the go-containerregistry it is built with.
const Version = "go-containerregistry v0.22.1"

func main() {
	archive := flag.String("archive", "", "docker-archive holding the image")
	from := flag.String("from", "", "the image's tag in the archive")
	to := flag.String("to", "", "the reference to push it to (plain HTTP)")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("push", Version)
		return
	}
	if err := push(*archive, *from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "push:", err)
		os.Exit(1)
	}
}

func push(archive, from, to string) error {
	if archive == "" || from == "" || to == "" {
		return fmt.Errorf("-archive, -from and -to are required")
	}
	src, err := name.NewTag(from)
	if err != nil {
		return err
	}
	dst, err := name.ParseReference(to, name.Insecure)
	if err != nil {
		return err
	}
	img, err := tarball.ImageFromPath(archive, &src)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", from, archive, err)
	}
	if err := remote.Write(dst, img); err != nil {
		return fmt.Errorf("push %s to %s: %w", from, to, err)
	}
	return nil
}
