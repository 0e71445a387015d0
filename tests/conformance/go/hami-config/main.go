// ka-conform-hami-config runs kube-accel's rendered HAMi configs through HAMi's own types and loaders.
//
//	ka-conform-hami-config device-config FILE   # the scheduler/device-plugin device-config.yaml
//	ka-conform-hami-config node-config FILE     # the device plugin's /config/config.json
//	ka-conform-hami-config decode NODE DEVCFG   # a Node (JSON) as HAMi's scheduler reads its registration
//
// Both are decoded strictly (an unknown or misspelt key is an error, where HAMi itself would silently ignore
// it), then handed to HAMi's loader (config.LoadConfig + config.InitDevicesWithConfig for the device config).
// On success the decoded NVIDIA part is printed as JSON for the test to compare with the chart values.
//
// decode initialises HAMi's devices from DEVCFG (config.LoadConfig + config.InitDevicesWithConfig, as
// cmd/scheduler does) and hands NODE to the NVIDIA device's GetNodeDevices (pkg/device/nvidia/device.go), the
// scheduler's reader of hami.io/node-nvidia-register: it prints the devices HAMi would schedule on, as JSON.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"

	"gopkg.in/yaml.v2"

	corev1 "k8s.io/api/core/v1"

	"github.com/Project-HAMi/HAMi/pkg/device"
	"github.com/Project-HAMi/HAMi/pkg/device/nvidia"
	"github.com/Project-HAMi/HAMi/pkg/scheduler/config"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == "decode" {
		decode(os.Args[2], os.Args[3])
		return
	}
	if len(os.Args) != 3 {
		fail("usage: %s device-config|node-config FILE | decode NODE DEVCFG", os.Args[0])
	}
	data, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	switch os.Args[1] {
	case "device-config":
		var strict config.Config
		if err := yaml.UnmarshalStrict(data, &strict); err != nil {
			fail("device-config: strict decoding into HAMi config.Config: %v", err)
		}
		// HAMi's own loader (what the scheduler and the device plugin call) must agree with the strict decode.
		loaded, err := config.LoadConfig(os.Args[2])
		if err != nil {
			fail("device-config: HAMi config.LoadConfig: %v", err)
		}
		if !reflect.DeepEqual(*loaded, strict) {
			fail("device-config: config.LoadConfig and the strict decode differ")
		}
		if err := config.InitDevicesWithConfig(loaded); err != nil {
			fail("device-config: HAMi config.InitDevicesWithConfig: %v", err)
		}
		out, _ := json.Marshal(loaded.NvidiaConfig)
		fmt.Println(string(out))
	case "node-config":
		var cfgs nvidia.DevicePluginConfigs
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfgs); err != nil {
			fail("node-config: strict decoding into HAMi nvidia.DevicePluginConfigs: %v", err)
		}
		out, _ := json.Marshal(cfgs)
		fmt.Println(string(out))
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func decode(nodePath, configPath string) {
	data, err := os.ReadFile(nodePath)
	if err != nil {
		fail("%v", err)
	}
	var node corev1.Node
	if err := json.Unmarshal(data, &node); err != nil {
		fail("decode: node JSON: %v", err)
	}
	loaded, err := config.LoadConfig(configPath)
	if err != nil {
		fail("decode: HAMi config.LoadConfig: %v", err)
	}
	if err := config.InitDevicesWithConfig(loaded); err != nil {
		fail("decode: HAMi config.InitDevicesWithConfig: %v", err)
	}
	dev, ok := device.GetDevices()[nvidia.NvidiaGPUDevice]
	if !ok {
		fail("decode: HAMi initialised no %s device", nvidia.NvidiaGPUDevice)
	}
	devices, err := dev.GetNodeDevices(node)
	if err != nil {
		fail("decode: HAMi GetNodeDevices: %v", err)
	}
	out, _ := json.Marshal(devices)
	fmt.Println(string(out))
}
