// upstream: hami-v2.10.0 github.com/Project-HAMi/HAMi
module kube-accel.io/conformance/hami-config

go 1.26

require github.com/Project-HAMi/HAMi v0.0.0
