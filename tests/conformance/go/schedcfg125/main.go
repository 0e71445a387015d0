// Command ka-conform-schedcfg125 loads KubeSchedulerConfiguration files the way kube-scheduler v1.25 does
// (cmd/kube-scheduler/app/options/configfile.go loadConfig: the scheme's strict UniversalDecoder with defaulting,
// then options.go ApplyTo: validation.ValidateKubeSchedulerConfiguration), v1.25 being the oldest Kubernetes the
// charts support. It prints one line per file and exits 1 when any file is refused.
package main

import (
	"fmt"
	"os"

	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
)

func load(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		return fmt.Errorf("decode: got %s, not a KubeSchedulerConfiguration", gvk)
	}
	cfg.TypeMeta.APIVersion = gvk.GroupVersion().String()
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	for _, e := range cfg.Extenders {
		fmt.Printf("%s: extender %s filter=%q bind=%q managed=%d\n", path, e.URLPrefix, e.FilterVerb, e.BindVerb, len(e.ManagedResources))
	}
	return nil
}

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		if err := load(path); err != nil {
			fmt.Printf("%s: refused: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: ok\n", path)
	}
	if failed {
		os.Exit(1)
	}
}
