// upstream: none
module kube-accel.local/conformance/promql

go 1.26.0

require github.com/prometheus/prometheus v0.316.0
