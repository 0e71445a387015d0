// Command ka-conform-dra-config runs opaque device configs through NVIDIA's DRA driver v0.4.1 exactly as its kubelet
// plugin does when it prepares a claim (cmd/gpu-kubelet-plugin/device_state.go prepareDevices): the config JSON is
// decoded by GetOpaqueDeviceConfigs with configapi.StrictDecoder (unknown fields fail), the decoded object must be
// one of the types prepareDevices accepts, then Normalize() and Validate() run. Feature gates are set through the
// driver's own gate registry with the syntax of the plugin's --feature-gates flag (pkg/flags/featuregates.go), then
// checked by featuregates.ValidateFeatureGates as main.go does.
//
// This file is compiled into the kubelet plugin's own package (package main) by scripts/upstream.sh with
// `go test -c -overlay`, so every function it calls is the plugin's, unmodified; TestMain replaces the test run.
//
//	ka-conform-dra-config [--feature-gates=MPSSupport=true,...] < configs.json
//	stdin:  a JSON list of config objects, e.g. {"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig",...}
//	stdout: a JSON list, same order, of {"ok": bool, "error": "..." | null, "normalized": {...} | null}
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/spf13/pflag"

	configapi "sigs.k8s.io/dra-driver-nvidia-gpu/api/nvidia.com/resource/v1beta1"
	"sigs.k8s.io/dra-driver-nvidia-gpu/pkg/featuregates"
)

type configResult struct {
	OK         bool            `json:"ok"`
	Error      *string         `json:"error"`
	Normalized json.RawMessage `json:"normalized"`
}

func fail(msg string) configResult {
	return configResult{Error: &msg, Normalized: json.RawMessage("null")}
}

// check runs one config the way prepareDevices does for a claim whose allocation carries it (source: claim).
func check(raw json.RawMessage) configResult {
	configs, err := GetOpaqueDeviceConfigs(
		configapi.StrictDecoder,
		DriverName,
		[]resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver:     DriverName,
					Parameters: runtime.RawExtension{Raw: raw},
				},
			},
		}},
	)
	if err != nil {
		return fail(err.Error())
	}
	if len(configs) != 1 {
		return fail(fmt.Sprintf("decoded %d configs from one", len(configs)))
	}
	// The types prepareDevices casts to configapi.Interface; anything else it refuses with this message.
	var config configapi.Interface
	switch c := configs[0].Config.(type) {
	case *configapi.GpuConfig:
		config = c
	case *configapi.MigDeviceConfig:
		config = c
	case *configapi.VfioDeviceConfig:
		config = c
	default:
		return fail("runtime object is not a recognized configuration")
	}
	if err := config.Normalize(); err != nil {
		return fail(fmt.Sprintf("error normalizing GPU config: %v", err))
	}
	if err := config.Validate(); err != nil {
		return fail(fmt.Sprintf("error validating GPU config: %v", err))
	}
	normalized, err := json.Marshal(config)
	if err != nil {
		return fail(err.Error())
	}
	return configResult{OK: true, Normalized: normalized}
}

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("ka-conform-dra-config", flag.ExitOnError)
	gates := fs.String("feature-gates", "", "the DRA driver's feature gates, as its --feature-gates flag takes them")
	_ = fs.Parse(os.Args[1:])
	if *gates != "" {
		if err := featuregates.FeatureGates().(pflag.Value).Set(*gates); err != nil {
			fmt.Fprintln(os.Stderr, "--feature-gates:", err)
			os.Exit(2)
		}
	}
	if err := featuregates.ValidateFeatureGates(); err != nil {
		fmt.Fprintln(os.Stderr, "--feature-gates:", err)
		os.Exit(2)
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(input, &items); err != nil {
		fmt.Fprintln(os.Stderr, "stdin must be a JSON list of config objects:", err)
		os.Exit(2)
	}
	results := make([]configResult, 0, len(items))
	for _, item := range items {
		results = append(results, check(item))
	}
	out, _ := json.Marshal(results)
	fmt.Println(string(out))
	os.Exit(0)
}
