// upstream: none
module kube-accel.local/conformance/k3s-template

go 1.26.0
