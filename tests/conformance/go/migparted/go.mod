// upstream: mig-parted-v0.15.0 github.com/NVIDIA/mig-parted
module kube-accel.local/conformance/migparted

go 1.26.0

require (
	github.com/NVIDIA/mig-parted v0.15.0
	k8s.io/apimachinery v0.36.3
	sigs.k8s.io/yaml v1.6.0
)
