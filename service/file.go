package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The configuration file (COORDINATOR_CONFIG, -config) is a YAML mapping of settings. A key is
// its variable's name in lower case without COORDINATOR_ (FileKey): listen, database_url,
// kafka_brokers, tokens, … . Every value is read exactly as its variable's text would be, so
// the file, the environment and the flags share one parser and one validation; a list setting
// may be written as a YAML list and a map setting as a YAML mapping:
//
//	database_url: postgres://coordinator@db/app
//	kafka_brokers: [kafka-1:9092, kafka-2:9092]
//	databases: {billing: "postgres://coordinator@db/billing"}
//	tokens:
//	  - ci:submit:2b7e1516...
//	  - {name: ops, roles: [admin], token: 28aed2a6...}
//	statements:
//	  insert_order: INSERT INTO orders (id, total) VALUES ($1, $2)
//	topics: [orders]
//
// Precedence: flags > environment > file > defaults (Layer).

// ReadFile reads the YAML configuration file. It returns the values by variable name, in the
// variable's text form, for Layer. known lists the variables a file may set; any other key is
// refused, naming it (and the line). A null value leaves the setting unset.
func ReadFile(path string, known []string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configuration file: %w", err)
	}
	vals, err := parseFile(raw, known)
	if err != nil {
		return nil, fmt.Errorf("configuration file %s: %w", path, err)
	}
	return vals, nil
}

func parseFile(raw []byte, known []string) (map[string]string, error) {
	byKey := map[string]string{}
	for _, env := range known {
		byKey[FileKey(env)] = env
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) { // an empty file sets nothing
			return map[string]string{}, nil
		}
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document; put every setting in one mapping")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return map[string]string{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of settings (key: value)", root.Line)
	}
	out := map[string]string{}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a setting's key must be a plain name", k.Line)
		}
		env, ok := byKey[key]
		if !ok {
			return nil, fmt.Errorf("line %d: unknown setting %q%s", k.Line, key, hint(key, byKey))
		}
		if line, dup := seen[key]; dup {
			return nil, fmt.Errorf("line %d: setting %q is given twice (first on line %d)", k.Line, key, line)
		}
		seen[key] = k.Line
		text, set, err := valueText(env, v)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", v.Line, key, err)
		}
		if set {
			out[env] = text
		}
	}
	return out, nil
}

// hint suggests the key meant: the file key of a variable's name or of a flag.
func hint(key string, byKey map[string]string) string {
	norm := FileKey(strings.ToUpper(strings.ReplaceAll(key, "-", "_")))
	if _, ok := byKey[norm]; ok {
		return fmt.Sprintf(" (did you mean %q? keys are the variables' names in lower case, without COORDINATOR_)", norm)
	}
	return " (keys are the variables of `coordinator help` in lower case, without COORDINATOR_)"
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// valueText turns one YAML value into the variable's text. set is false for a null value.
func valueText(env string, v *yaml.Node) (text string, set bool, err error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", false, nil
		}
		return v.Value, true, nil
	case yaml.SequenceNode:
		st, _ := LookupSetting(env)
		sep := st.Sep
		if st.Kind != KindList {
			return "", false, errors.New("want a single value, not a list")
		}
		var parts []string
		for i, item := range v.Content {
			s, err := listItem(env, resolve(item))
			if err != nil {
				return "", false, fmt.Errorf("item %d: %w", i+1, err)
			}
			if strings.Contains(s, sep) {
				return "", false, fmt.Errorf("item %d contains %q, which separates the items", i+1, sep)
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, sep), len(parts) > 0, nil
	case yaml.MappingNode:
		st, _ := LookupSetting(env)
		if st.Kind != KindMap || st.fromMap == nil {
			return "", false, errors.New("want a single value, not a mapping")
		}
		m, err := stringMap(v)
		if err != nil {
			return "", false, err
		}
		s, err := st.fromMap(m)
		return s, true, err
	}
	return "", false, errors.New("unsupported value")
}

// listItem is one item of a list setting: a scalar, or for tokens a mapping
// {name, roles, token}.
func listItem(env string, n *yaml.Node) (string, error) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag != "!!null":
		return n.Value, nil
	case n.Kind == yaml.MappingNode && env == "COORDINATOR_TOKENS":
		var t struct {
			Name  string   `yaml:"name"`
			Roles []string `yaml:"roles"`
			Token string   `yaml:"token"`
		}
		// Decode with KnownFields through a fresh decoder: a misspelt field is refused. The
		// node is re-encoded first; the error names the field, not the token.
		b, err := yaml.Marshal(n)
		if err != nil {
			return "", err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&t); err != nil {
			return "", errors.New("a token is {name, roles, token} (or \"name:role[,role]:token\")")
		}
		if t.Name == "" || len(t.Roles) == 0 || t.Token == "" {
			return "", errors.New("a token needs name, roles and token")
		}
		return t.Name + ":" + strings.Join(t.Roles, ",") + ":" + t.Token, nil
	}
	return "", errors.New("want a single value")
}

// stringMap reads a mapping of scalar values.
func stringMap(n *yaml.Node) (map[string]string, error) {
	m := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return nil, fmt.Errorf("line %d: want name: value", k.Line)
		}
		if _, dup := m[k.Value]; dup {
			return nil, fmt.Errorf("line %d: %q is given twice", k.Line, k.Value)
		}
		m[k.Value] = v.Value
	}
	return m, nil
}

// Layer returns a getenv that answers from getenv and, for what getenv leaves unset (empty),
// from the file's values: flags (already over the environment in getenv) > environment > file.
func Layer(getenv func(string) string, file map[string]string) func(string) string {
	return func(key string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return file[key]
	}
}
