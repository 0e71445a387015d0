// Command ka-conform-promql parses PromQL expressions with Prometheus's own parser (promql/parser, the package
// the Prometheus server, the rule manager and promtool use) and reports what each expression selects.
//
//	ka-conform-promql FILE -> FILE JSON {"<id>": "<expr>", ...}
//	                          stdout JSON {"<id>": {"error": "", "metrics": [...], "labels": [...]}}
//
// "metrics": the metric names the expression's vector and matrix selectors select (their name or a __name__
// equality matcher; "" for a selector without one). "labels": every label name the expression relies on: in
// selector matchers, by/without groupings, on/ignoring/group_left/group_right and label_replace/label_join
// arguments. Exit status 0 with the report (parse errors are reported per expression), 1 on bad input.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Error   string   `json:"error"`
	Metrics []string `json:"metrics"`
	Labels  []string `json:"labels"`
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: ka-conform-promql FILE")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err.Error())
	}
	var exprs map[string]string
	if err := json.Unmarshal(raw, &exprs); err != nil {
		fail(fmt.Sprintf("%s: %v", os.Args[1], err))
	}
	out := map[string]result{}
	for id, text := range exprs {
		out[id] = inspect(text)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

func inspect(text string) result {
	// Default options, as the rule manager and promtool use them: no experimental functions.
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(text)
	if err != nil {
		return result{Error: err.Error(), Metrics: []string{}, Labels: []string{}}
	}
	metrics, names := map[string]bool{}, map[string]bool{}
	add := func(set map[string]bool, items ...string) {
		for _, i := range items {
			set[i] = true
		}
	}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		// Label arguments of label_replace/label_join are string literals; "" (e.g. no source) is dropped below.
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := n.Name
			for _, m := range n.LabelMatchers {
				if m.Name == labels.MetricName {
					if m.Type == labels.MatchEqual {
						name = m.Value
					}
					continue
				}
				add(names, m.Name)
			}
			add(metrics, name) // "" for a selector without a metric name
		case *parser.AggregateExpr:
			add(names, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				add(names, n.VectorMatching.MatchingLabels...)
				add(names, n.VectorMatching.Include...)
			}
		case *parser.Call:
			// label_replace(v, dst, replacement, src, regex) and label_join(v, dst, sep, src...): the label
			// arguments are string literals.
			switch n.Func.Name {
			case "label_replace":
				add(names, literal(n.Args[1]), literal(n.Args[3]))
			case "label_join":
				add(names, literal(n.Args[1]))
				for _, a := range n.Args[3:] {
					add(names, literal(a))
				}
			}
		}
		return nil
	})
	delete(names, "")
	return result{Metrics: sorted(metrics), Labels: sorted(names)}
}

func literal(e parser.Expr) string {
	if s, ok := e.(*parser.StringLiteral); ok {
		return s.Val
	}
	return ""
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
