// Command ka-conform-k3s-template renders a containerd config.toml the way k3s and RKE2 render theirs, for hosts
// shaped like theirs in tests/conformance/test_k3s_rke2_containerd.py.
//
// The mechanism follows k3s's pkg/agent/containerd/config.go (writeContainerdConfig and templateGenerations, read at
// commit 06ea261ce3f1, 2026) and pkg/agent/templates/templates.go (ParseTemplateFromConfig), which RKE2 runs as a
// library (its go.mod requires github.com/k3s-io/k3s):
// the operator's config-v3.toml.tmpl when there is one, else the base template itself, is parsed with Go's
// text/template; the base template is associated with it under the name "base" (so `{{ template "base" . }}` extends
// it); the result is executed with a ContainerdConfig whose ExtraRuntimes k3s fills from the runtimes it finds on the
// host (nvidia-container-runtime in /usr/local/nvidia/toolkit or on PATH: runtime "nvidia").
//
// k3s's own base template is not built here: the Go module proxy answers 403 for github.com/k3s-io/k3s, and the
// package imports k3s's whole agent (its go.mod replaces Kubernetes with k3s's fork). The base it renders with is
// kube-accel's stand-in (base-v3.toml.tmpl beside this file), written to produce the tables k3s's generated
// config.toml has; the data type below has the names of the k3s fields that stand-in and operators' templates use.
//
//	ka-conform-k3s-template -base FILE -data FILE.json [-template FILE]  -> the rendered config.toml on stdout
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"text/template"
)

// RuntimeConfig is one entry of ExtraRuntimes: a struct value, so `index .ExtraRuntimes "x"` on a missing name is
// a zero struct (true in a template's if), as in k3s.
type RuntimeConfig struct {
	RuntimeType string
	BinaryName  string
}

type Containerd struct {
	Address  string
	Root     string
	State    string
	Opt      string
	Template string
	Registry string
}

type AgentConfig struct {
	PauseImage  string
	Snapshotter string
	CNIBinDir   string
	CNIConfDir  string
}

type Node struct {
	Containerd     Containerd
	AgentConfig    AgentConfig
	SELinux        bool
	DefaultRuntime string
}

type ContainerdConfig struct {
	NodeConfig         *Node
	SystemdCgroup      bool
	EnableUnprivileged bool
	ExtraRuntimes      map[string]RuntimeConfig
	Program            string
}

func read(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return string(b)
}

func main() {
	base := flag.String("base", "", "base template")
	data := flag.String("data", "", "ContainerdConfig as JSON")
	user := flag.String("template", "", "the operator's config-v3.toml.tmpl (default: the base template)")
	flag.Parse()
	if *base == "" || *data == "" {
		fmt.Fprintln(os.Stderr, "usage: ka-conform-k3s-template -base FILE -data FILE.json [-template FILE]")
		os.Exit(2)
	}
	var cfg ContainerdConfig
	if err := json.Unmarshal([]byte(read(*data)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "data:", err)
		os.Exit(2)
	}
	baseText := read(*base)
	userText := baseText
	if *user != "" {
		userText = read(*user)
	}
	t, err := template.New("compiled_template").Parse(userText)
	if err == nil {
		_, err = t.New("base").Parse(baseText)
	}
	if err == nil {
		err = t.Execute(os.Stdout, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
