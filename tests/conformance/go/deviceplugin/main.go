// Command ka-conform-deviceplugin runs kube-accel's rendered device-plugin configs and resource names through
// NVIDIA k8s-device-plugin v0.20.0's own config package (api/config/v1) and the Kubernetes validation it uses.
//
//	ka-conform-deviceplugin config FILE  -> JSON {"config": <as the plugin loads it>, "strict": [problems]}
//	ka-conform-deviceplugin names FILE   -> FILE JSON {"labelValues": [...], "resourceNames": [...],
//	                                        "labelKeys": [...], "dns1123Labels": [...], "dns1123Subdomains": [...]},
//	                                        stdout JSON {"labelValues": {v: [problems]}, "resourceNames": {...}, ...}
//
// Exit status 0 with the report; 1 when the plugin's own loader refuses the file (its message on stderr).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: ka-conform-deviceplugin config FILE | names")
	}
	switch os.Args[1] {
	case "config":
		if len(os.Args) != 3 {
			fail("usage: ka-conform-deviceplugin config FILE")
		}
		checkConfig(os.Args[2])
	case "names":
		if len(os.Args) != 3 {
			fail("usage: ka-conform-deviceplugin names FILE")
		}
		checkNames(os.Args[2])
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

// checkConfig loads FILE the way the plugin does (spec.NewConfig with --config-file, api/config/v1/config.go:45,
// then DisableResourceNamingInConfig as cmd/nvidia-device-plugin/main.go:356), and decodes it strictly.
func checkConfig(path string) {
	var loaded *spec.Config
	app := cli.NewApp()
	app.Flags = []cli.Flag{&cli.StringFlag{Name: "config-file"}}
	app.Action = func(c *cli.Context) error {
		config, err := spec.NewConfig(c, app.Flags)
		if err != nil {
			return err
		}
		spec.DisableResourceNamingInConfig(config)
		loaded = config
		return nil
	}
	if err := app.Run([]string{"loader", "--config-file", path}); err != nil {
		fail(err.Error())
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	var problems []string
	// Unknown or duplicate keys: the plugin's own decode (sigs.k8s.io/yaml.Unmarshal) drops them silently.
	if err := yaml.UnmarshalStrict(raw, &spec.Config{}); err != nil {
		problems = append(problems, err.Error())
	}
	// Types with their own UnmarshalJSON (sharing.*) escape the strict decoder: walk their keys too.
	var doc interface{}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		fail(err.Error())
	}
	problems = append(problems, unknownKeys(doc, reflect.TypeOf(spec.Config{}), "")...)
	sort.Strings(problems)
	out, _ := json.Marshal(map[string]interface{}{"config": loaded, "strict": problems})
	fmt.Println(string(out))
}

// jsonFields maps the JSON names of a struct's fields (embedded structs flattened) to their types.
func jsonFields(t reflect.Type, into map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && tag == "" {
			jsonFields(f.Type, into)
			continue
		}
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		into[tag] = f.Type
	}
}

func unknownKeys(v interface{}, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var problems []string
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]interface{})
		if !ok {
			return nil // unions such as ReplicatedDevices ("all", a count or a list): the plugin's decoder checks them
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for key, value := range obj {
			ft, known := fields[key]
			if !known {
				problems = append(problems, fmt.Sprintf("unknown field %q at %s (the plugin ignores it)", key, orRoot(path)))
				continue
			}
			problems = append(problems, unknownKeys(value, ft, path+"."+key)...)
		}
	case reflect.Slice:
		if items, ok := v.([]interface{}); ok {
			for i, item := range items {
				problems = append(problems, unknownKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return problems
}

func orRoot(path string) string {
	if path == "" {
		return "the top level"
	}
	return strings.TrimPrefix(path, ".")
}

// checkNames validates label values (k8s.io/apimachinery validation.IsValidLabelValue, what the API server
// applies to node labels) and extended resource names: the device plugin's own NewResourceName
// (api/config/v1/resources.go:48) plus the API server's rules for extended resources, a qualified name that
// stays qualified with the "requests." quota prefix and is not in the kubernetes.io domain.
func checkNames(path string) {
	var in struct {
		LabelValues       []string `json:"labelValues"`
		ResourceNames     []string `json:"resourceNames"`
		LabelKeys         []string `json:"labelKeys"`
		DNS1123Labels     []string `json:"dns1123Labels"`
		DNS1123Subdomains []string `json:"dns1123Subdomains"`
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		fail(path + ": " + err.Error())
	}
	labels := map[string][]string{}
	for _, v := range in.LabelValues {
		labels[v] = append([]string{}, validation.IsValidLabelValue(v)...)
	}
	resources := map[string][]string{}
	for _, name := range in.ResourceNames {
		problems := append([]string{}, validation.IsQualifiedName(name)...)
		for _, p := range validation.IsQualifiedName("requests." + name) {
			problems = append(problems, "as a quota name: "+p)
		}
		domain, _, found := strings.Cut(name, "/")
		if !found {
			problems = append(problems, "an extended resource name needs a domain prefix")
		} else if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
			problems = append(problems, "the kubernetes.io domain is reserved for native resources")
		}
		if domain == spec.ResourceNamePrefix {
			if _, err := spec.NewResourceName(name); err != nil {
				problems = append(problems, "device plugin: "+err.Error())
			}
		}
		resources[name] = problems
	}
	// Label keys, namespaces (RFC 1123 labels) and Secret names (subdomains): the API server's own checks of the
	// inventory values that become them (accel_k8s_names.py).
	byRule := func(values []string, rule func(string) []string) map[string][]string {
		out := map[string][]string{}
		for _, v := range values {
			out[v] = append([]string{}, rule(v)...)
		}
		return out
	}
	out, _ := json.Marshal(map[string]interface{}{
		"labelValues": labels, "resourceNames": resources,
		"labelKeys":         byRule(in.LabelKeys, validation.IsQualifiedName),
		"dns1123Labels":     byRule(in.DNS1123Labels, validation.IsDNS1123Label),
		"dns1123Subdomains": byRule(in.DNS1123Subdomains, validation.IsDNS1123Subdomain),
	})
	fmt.Println(string(out))
}
