// Command ka-conform-migparted reads a kube-accel mig-parted config with mig-parted v0.15.0's own spec package
// (api/spec/v1, the decoder cmd/nvidia-mig-parted/assert/assert.go:189 uses) and reports, per config, which
// PCI device IDs its device filters select (MigConfigSpec.MatchesDeviceFilter, api/spec/v1/helpers.go:24),
// filters that do not parse (that function drops the parse error), and whether the config name is a valid
// Kubernetes label value (the nvidia.com/mig.config label mig-manager reads).
//
//	ka-conform-migparted FILE DEVICE_ID...  -> JSON {config: {"matches": [ids], "badFilters": [...], "label": [...]}}
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	v1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"github.com/NVIDIA/mig-parted/pkg/types"
)

type report struct {
	Matches    []string `json:"matches"`
	BadFilters []string `json:"badFilters"`
	Label      []string `json:"label"`
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: ka-conform-migparted FILE DEVICE_ID...")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var spec v1.Spec
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "unmarshal error:", err)
		os.Exit(1)
	}
	var ids []types.DeviceID
	for _, s := range os.Args[2:] {
		id, err := types.NewDeviceIDFromString(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ids = append(ids, id)
	}
	out := map[string]report{}
	for name, entries := range spec.MigConfigs {
		r := report{Matches: []string{}, BadFilters: []string{}, Label: validation.IsValidLabelValue(name)}
		if r.Label == nil {
			r.Label = []string{}
		}
		for _, entry := range entries {
			var filters []string
			switch f := entry.DeviceFilter.(type) {
			case string:
				filters = []string{f}
			case []string:
				filters = f
			}
			for _, f := range filters {
				if _, err := types.NewDeviceIDFromString(f); err != nil {
					r.BadFilters = append(r.BadFilters, err.Error())
				}
			}
			for _, id := range ids {
				if entry.MatchesDeviceFilter(id) {
					r.Matches = append(r.Matches, id.String())
				}
			}
		}
		out[name] = r
	}
	data, _ := json.Marshal(out)
	fmt.Println(string(data))
}
