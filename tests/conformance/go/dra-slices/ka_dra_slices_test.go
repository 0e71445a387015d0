// Command ka-conform-dra-slices: the devices NVIDIA's DRA driver v0.4.1 kubelet plugin publishes for a node whose
// GPUs are a recorded NVML snapshot, computed by the plugin's own code over go-nvml's mock (pkg/nvml/mock, of the
// go-nvml version the driver vendors).
//
// This file is compiled into the kubelet plugin's package (cmd/gpu-kubelet-plugin, package main) by
// scripts/upstream.sh with `go test -c`; TestMain replaces the test run. Upstream code that runs unmodified:
// deviceLib.enumerateAllPossibleDevices (nvlib.go: GPU info, static MIG devices and their profiles), go-nvlib's
// device wrapper, AllocatableDevice.GetDevice (deviceinfo.go, mig.go: names, attributes, capacities), and with
// --kubeconfig the plugin's publishing path: kubeletplugin.Start with the options NewDriver passes (driver.go), then
// driver.publishResources, which hands the devices to k8s.io/dynamic-resource-allocation's ResourceSlice controller.
//
// Stand-ins (what a node would give the plugin and a recorded snapshot cannot):
//
//   - NVML: go-nvml's mock, filled from the spec on stdin (kalab.dra builds it from tests/data/nvml/<record>.json);
//     every NVML call the enumeration makes is answered from it, any other call panics (the mock's own behaviour).
//
//   - newDeviceLib (locating libnvidia-ml.so.1 and nvidia-smi under the driver root, nvml.New): replaced by a
//     deviceLib value built here around the mock; nothing under a driver root is read.
//
//   - sysfs: the PCIe-root attribute reads /sys/bus/pci/devices/<bus id> (a constant path in
//     k8s.io/dynamic-resource-allocation/deviceattribute); kalab.dra runs this command with an empty directory bound
//     there (the records hold no PCI topology), so upstream publishes without it, as on a host where it cannot be
//     resolved, and never reads the machine's own PCI devices.
//
//   - kubelet registration: with --kubeconfig the plugin's registration and DRA sockets are served in a temp dir
//     that no kubelet connects to; only the ResourceSlice publishing reaches the API server.
//
//     ka-conform-dra-slices --node-name NODE [--feature-gates G=true,...] [--kubeconfig FILE [--wait 60s] [--serve]] < spec.json
//     stdout: {"devices": [resource.k8s.io/v1 Device...], "driverResources": {"pools": {...}}, "resourceSlices": [...]}
//     ("resourceSlices": the objects read back from the API server after publishing; [] without --kubeconfig)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreclientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"

	"sigs.k8s.io/dra-driver-nvidia-gpu/pkg/featuregates"
	pkgflags "sigs.k8s.io/dra-driver-nvidia-gpu/pkg/flags"
)

// The mock spec kalab.dra writes: NVML's answers for one node.
type specPlacement struct {
	Start uint32 `json:"start"`
	Size  uint32 `json:"size"`
}

type specGIProfile struct {
	Index      int                         `json:"index"` // NVML's GPU_INSTANCE_PROFILE_* index
	Info       nvml.GpuInstanceProfileInfo `json:"info"`
	Placements []specPlacement             `json:"placements"`
	CIProfiles []specCIProfile             `json:"ciProfiles"`
}

type specCIProfile struct {
	Index    int                             `json:"index"`    // COMPUTE_INSTANCE_PROFILE_* index
	EngIndex int                             `json:"engIndex"` // COMPUTE_INSTANCE_ENGINE_PROFILE_* index
	Info     nvml.ComputeInstanceProfileInfo `json:"info"`
}

type specMig struct {
	UUID           string        `json:"uuid"`
	GIID           uint32        `json:"giId"`
	CIID           uint32        `json:"ciId"`
	GIProfileIndex int           `json:"giProfileIndex"`
	CIProfileIndex int           `json:"ciProfileIndex"`
	Placement      specPlacement `json:"placement"`
}

type specGPU struct {
	UUID          string          `json:"uuid"`
	Name          string          `json:"name"`
	Minor         int             `json:"minor"`
	Brand         nvml.BrandType  `json:"brand"`
	Architecture  uint32          `json:"architecture"`
	PCIBusID      string          `json:"pciBusId"`
	MemoryTotal   uint64          `json:"memoryTotalBytes"`
	CudaCC        [2]int          `json:"cudaComputeCapability"`
	MigMode       *[2]int         `json:"migMode"` // null: MIG not supported (NVML ERROR_NOT_SUPPORTED)
	MaxMigDevices int             `json:"maxMigDeviceCount"`
	GIProfiles    []specGIProfile `json:"giProfiles"`
	MigDevices    []specMig       `json:"migDevices"`
}

type mockSpec struct {
	DriverVersion     string    `json:"driverVersion"`
	CudaDriverVersion int       `json:"cudaDriverVersion"`
	GPUs              []specGPU `json:"gpus"`
}

func ciProfileOf(g *specGIProfile, index, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	for _, c := range g.CIProfiles {
		if c.Index == index && c.EngIndex == eng {
			return c.Info, nvml.SUCCESS
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
}

func giProfileOf(g *specGPU, index int) *specGIProfile {
	for i := range g.GIProfiles {
		if g.GIProfiles[i].Index == index {
			return &g.GIProfiles[i]
		}
	}
	return nil
}

// newMockGPU answers, for one recorded GPU, the NVML calls the plugin's enumeration makes.
func newMockGPU(s *mockSpec, g *specGPU) *mock.Device {
	d := &mock.Device{}
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return g.Minor, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return g.UUID, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return g.Name, nvml.SUCCESS }
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return g.Brand, nvml.SUCCESS }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) {
		return nvml.DeviceArchitecture(g.Architecture), nvml.SUCCESS
	}
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return g.CudaCC[0], g.CudaCC[1], nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: g.MemoryTotal}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var info nvml.PciInfo
		for i, c := range []byte(g.PCIBusID) {
			if i < len(info.BusId)-1 {
				info.BusId[i] = int8(c)
			}
		}
		return info, nvml.SUCCESS
	}
	// Not in the records: ERROR_NOT_SUPPORTED is what NVML answers on platforms without coherent memory (x86
	// PCIe/SXM hosts), where the plugin publishes no addressingMode attribute.
	d.GetAddressingModeFunc = func() (nvml.DeviceAddressingMode, nvml.Return) {
		return nvml.DeviceAddressingMode{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if g.MigMode == nil {
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
		return g.MigMode[0], g.MigMode[1], nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if g.MigMode == nil {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		if p := giProfileOf(g, index); p != nil {
			return p.Info, nvml.SUCCESS
		}
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		for _, p := range g.GIProfiles {
			if p.Info.Id == info.Id {
				var out []nvml.GpuInstancePlacement
				for _, pl := range p.Placements {
					out = append(out, nvml.GpuInstancePlacement{Start: pl.Start, Size: pl.Size})
				}
				return out, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return g.MaxMigDevices, nvml.SUCCESS }
	migs := make([]*mock.Device, len(g.MigDevices))
	for i := range g.MigDevices {
		m := &g.MigDevices[i]
		md := &mock.Device{}
		md.GetUUIDFunc = func() (string, nvml.Return) { return m.UUID, nvml.SUCCESS }
		md.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return int(m.GIID), nvml.SUCCESS }
		md.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return int(m.CIID), nvml.SUCCESS }
		migs[i] = md
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[i], nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		for i := range g.MigDevices {
			m := &g.MigDevices[i]
			if int(m.GIID) != id {
				continue
			}
			prof := giProfileOf(g, m.GIProfileIndex)
			if prof == nil {
				return nil, nvml.ERROR_NOT_FOUND
			}
			ciInfo, ret := ciProfileOf(prof, m.CIProfileIndex, 0)
			if ret != nvml.SUCCESS {
				return nil, nvml.ERROR_NOT_FOUND
			}
			gi := &mock.GpuInstance{}
			gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
				return nvml.GpuInstanceInfo{
					Device:    d,
					Id:        m.GIID,
					ProfileId: prof.Info.Id,
					Placement: nvml.GpuInstancePlacement{Start: m.Placement.Start, Size: m.Placement.Size},
				}, nvml.SUCCESS
			}
			gi.GetComputeInstanceProfileInfoFunc = func(index, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
				return ciProfileOf(prof, index, eng)
			}
			gi.GetComputeInstanceByIdFunc = func(ci int) (nvml.ComputeInstance, nvml.Return) {
				if ci != int(m.CIID) {
					return nil, nvml.ERROR_NOT_FOUND
				}
				c := &mock.ComputeInstance{}
				c.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
					return nvml.ComputeInstanceInfo{Device: d, GpuInstance: gi, Id: m.CIID, ProfileId: ciInfo.Id}, nvml.SUCCESS
				}
				return c, nvml.SUCCESS
			}
			return gi, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d
}

func newMockNVML(s *mockSpec) *mock.Interface {
	devices := make([]*mock.Device, len(s.GPUs))
	for i := range s.GPUs {
		devices[i] = newMockGPU(s, &s.GPUs[i])
	}
	lib := &mock.Interface{}
	lib.InitWithFlagsFunc = func(uint32) nvml.Return { return nvml.SUCCESS }
	lib.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return len(devices), nvml.SUCCESS }
	lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return devices[i], nvml.SUCCESS
	}
	lib.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for i := range s.GPUs {
			if s.GPUs[i].UUID == uuid {
				return devices[i], nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	lib.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return s.DriverVersion, nvml.SUCCESS }
	lib.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return s.CudaDriverVersion, nvml.SUCCESS }
	// go-nvlib asks whether the loaded libnvidia-ml has a symbol before calling it: the recorded drivers have them all.
	lib.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
	}
	return lib
}

type output struct {
	Devices         []resourceapi.Device          `json:"devices"`
	DriverResources resourceslice.DriverResources `json:"driverResources"`
	ResourceSlices  []resourceapi.ResourceSlice   `json:"resourceSlices"`
}

// enumerate runs the plugin's device discovery over the mock.
func enumerate(s *mockSpec) (*PerGPUAllocatableDevices, *deviceLib, error) {
	nvmllib := newMockNVML(s)
	l := &deviceLib{
		Interface:         nvdev.New(nvmllib),
		nvmllib:           nvmllib,
		gpuInfosByUUID:    make(map[string]*GpuInfo),
		gpuUUIDbyPCIBusID: make(map[PCIBusID]string),
		devhandleByUUID:   make(map[string]nvml.Device),
	}
	perGPU, err := l.enumerateAllPossibleDevices()
	return perGPU, l, err
}

// publish runs the plugin's publishing path against the API server of kubeconfig and returns the slices it stored.
func publish(ctx context.Context, perGPU *PerGPUAllocatableDevices, l *deviceLib, nodeName, kubeconfig string,
	wait time.Duration, serve bool) ([]resourceapi.ResourceSlice, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	client, err := coreclientset.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "ka-dra-plugin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	config := &Config{
		flags: &Flags{
			nodeName:                      nodeName,
			kubeletRegistrarDirectoryPath: tmp + "/registry",
			kubeletPluginsDirectoryPath:   tmp + "/plugins",
		},
		clientsets: pkgflags.ClientSets{Core: client},
	}
	for _, dir := range []string{config.flags.kubeletRegistrarDirectoryPath, config.DriverPluginPath()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	d := &driver{
		client: client,
		state:  &DeviceState{perGPUAllocatable: perGPU, nvdevlib: l, config: config},
	}
	// The options NewDriver passes (driver.go), without DeviceMetadata (a gate that is off by default).
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(d.client),
		kubeletplugin.NodeName(nodeName),
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.Serialize(false),
		kubeletplugin.RegistrarDirectoryPath(config.flags.kubeletRegistrarDirectoryPath),
		kubeletplugin.PluginDataDirectoryPath(config.DriverPluginPath()),
	)
	if err != nil {
		return nil, fmt.Errorf("kubeletplugin.Start: %w", err)
	}
	defer helper.Stop()
	d.pluginhelper = helper
	if err := d.publishResources(ctx, config); err != nil {
		return nil, err
	}
	selector := fields.Set{resourceapi.ResourceSliceSelectorNodeName: nodeName,
		resourceapi.ResourceSliceSelectorDriver: DriverName}.AsSelector().String()
	want := len(perGPU.GetAllDevices())
	deadline := time.Now().Add(wait)
	var stored []resourceapi.ResourceSlice
	for {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err == nil {
			got := 0
			for _, s := range list.Items {
				got += len(s.Spec.Devices)
			}
			if got == want && len(list.Items) > 0 && int64(len(list.Items)) == list.Items[0].Spec.Pool.ResourceSliceCount {
				stored = list.Items
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the ResourceSlices of node %s did not reach the API server within %s (last error: %v)",
				nodeName, wait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if serve {
		// As the kubelet plugin: keep the controller running (it repairs deleted or changed slices) until stopped.
		out, _ := json.Marshal(map[string]any{"published": len(stored)})
		fmt.Println(string(out))
		<-ctx.Done()
	}
	return stored, nil
}

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("ka-conform-dra-slices", flag.ExitOnError)
	nodeName := fs.String("node-name", "", "the node whose devices are published (pool name and spec.nodeName)")
	gates := fs.String("feature-gates", "", "the DRA driver's feature gates, as its --feature-gates flag takes them")
	kubeconfig := fs.String("kubeconfig", "", "publish through the plugin's ResourceSlice controller to this API server")
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for the published slices")
	serve := fs.Bool("serve", false, "with --kubeconfig: keep publishing until SIGTERM, as the kubelet plugin does")
	verbosity := fs.Int("v", 0, "klog verbosity (logs on stderr)")
	_ = fs.Parse(os.Args[1:])
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", fmt.Sprint(*verbosity))
	if *nodeName == "" {
		fmt.Fprintln(os.Stderr, "--node-name is required")
		os.Exit(2)
	}
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
	if featuregates.Enabled(featuregates.DynamicMIG) {
		// Its partitionable devices (counters, split slices) need more of NVML than the records hold.
		fmt.Fprintln(os.Stderr, "--feature-gates: DynamicMIG is not supported by this stand-in")
		os.Exit(2)
	}
	var s mockSpec
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		fmt.Fprintln(os.Stderr, "stdin: the NVML mock spec:", err)
		os.Exit(2)
	}
	perGPU, l, err := enumerate(&s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "device enumeration:", err)
		os.Exit(1)
	}
	out := output{ResourceSlices: []resourceapi.ResourceSlice{}}
	all := perGPU.GetAllDevices()
	for _, name := range slices.Sorted(maps.Keys(all)) {
		out.Devices = append(out.Devices, all[name].GetDevice())
	}
	// What publishResources hands to the ResourceSlice controller (driver.go, DynamicMIG off): one pool named after
	// the node, one slice with every device (in map order there; sorted here).
	out.DriverResources = resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		*nodeName: {Slices: []resourceslice.Slice{{Devices: out.Devices}}},
	}}
	if *kubeconfig != "" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer cancel()
		stored, err := publish(ctx, perGPU, l, *nodeName, *kubeconfig, *wait, *serve)
		if err != nil {
			fmt.Fprintln(os.Stderr, "publish:", err)
			os.Exit(1)
		}
		out.ResourceSlices = stored
	}
	data, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(data))
	os.Exit(0)
}
