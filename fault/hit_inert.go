//go:build !stratumfault

package fault

// Enabled reports whether this binary was built with the stratumfault tag
// and so can arm points. It is false in the product.
const Enabled = false

// Hit does nothing: this binary cannot arm a fault point.
func Hit(Point) {}
