// upstream: k8s-device-plugin-v0.20.0 github.com/NVIDIA/k8s-device-plugin
module kube-accel.local/conformance/deviceplugin

go 1.26.0

require (
	github.com/NVIDIA/k8s-device-plugin v0.20.0
	github.com/urfave/cli/v2 v2.27.7
	k8s.io/apimachinery v0.36.3
	sigs.k8s.io/yaml v1.6.0
)
