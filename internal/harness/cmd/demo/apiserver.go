// The real demo's checks through the real kube-apiserver (-real).

package main

import (
	"context"
	"fmt"
)

// configMapName is the ConfigMap, in namespace default, the real demo
// writes before the upgrade and reads back after it and the rollback.
const configMapName = "demo-written-by"

// writeConfigMap creates the ConfigMap through the apiserver, holding the
// version it serves.
func (d *demo) writeConfigMap(ctx context.Context) error {
	api, err := d.node.API()
	if err != nil {
		return err
	}
	defer api.Close()
	v, err := api.Version(ctx)
	if err != nil {
		return err
	}
	val := "kube-apiserver " + v
	if err := api.CreateConfigMap(ctx, "default", configMapName, map[string]string{"written-by": val}); err != nil {
		return err
	}
	d.say("kube-apiserver serves %s; through it the demo created ConfigMap default/%s, written-by = %q", v, configMapName, val)
	return nil
}

// readConfigMap is the step after what (the upgrade, the rollback): the
// apiserver serves the good release's version and the ConfigMap reads back
// as written before the upgrade.
func (d *demo) readConfigMap(what string) func(context.Context) error {
	return func(ctx context.Context) error {
		api, err := d.node.API()
		if err != nil {
			return err
		}
		defer api.Close()
		v, err := api.Version(ctx)
		if err != nil {
			return err
		}
		if v != d.sc.good {
			return fmt.Errorf("after %s kube-apiserver serves %s, want %s", what, v, d.sc.good)
		}
		data, err := api.ConfigMap(ctx, "default", configMapName)
		if err != nil {
			return fmt.Errorf("after %s: %w", what, err)
		}
		want := "kube-apiserver " + d.sc.from
		if got := data["written-by"]; got != want {
			return fmt.Errorf("after %s ConfigMap default/%s reads written-by = %q, want %q", what, configMapName, got, want)
		}
		d.say("after %s kube-apiserver serves %s and read back ConfigMap default/%s: written-by = %q", what, v, configMapName, want)
		return nil
	}
}
