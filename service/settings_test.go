package service

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/configuration.md's table is generated from Settings: names, flags, defaults and
// help agree. On a difference, the test prints the table to paste.
func TestConfigurationTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/configuration.md")
	require.NoError(t, err)
	readme := string(raw)
	start := strings.Index(readme, "| variable | flag | default | meaning |")
	require.GreaterOrEqual(t, start, 0, "docs/configuration.md: no configuration table")
	end := strings.Index(readme[start:], "\n\n")
	require.Greater(t, end, 0, "docs/configuration.md: the table ends with a blank line")
	assert.Equal(t, MarkdownTable(), readme[start:start+end+1],
		"docs/configuration.md's table differs from service.Settings; replace it by:\n%s", MarkdownTable())
}

// Every Config field is set by exactly one setting (or is one of codeOnlyFields), and every
// setting's Field names a Config field.
func TestEverySettingDefinedOnce(t *testing.T) {
	t.Parallel()
	var fields []string
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == typ.PkgPath() {
				walk(f.Type, prefix+f.Name+".")
				continue
			}
			fields = append(fields, prefix+f.Name)
		}
	}
	walk(reflect.TypeFor[Config](), "")

	defined := map[string]string{}
	envs := map[string]bool{}
	flags := map[string]bool{}
	for _, s := range Settings {
		assert.False(t, envs[s.Env], "%s is defined twice", s.Env)
		envs[s.Env] = true
		if s.Flag != "" {
			assert.False(t, flags[s.Flag], "flag -%s is defined twice", s.Flag)
			flags[s.Flag] = true
		}
		assert.NotEmpty(t, s.Help, "%s has no help", s.Env)
		if s.Kind == KindList {
			assert.NotEmpty(t, s.Sep, "%s: a list needs its separator", s.Env)
		}
		if s.Kind == KindMap {
			assert.NotNil(t, s.fromMap, "%s: a map needs its YAML form", s.Env)
		}
		if s.Field == "" {
			assert.Contains(t, []string{EnvConfig, EnvLogLevel}, s.Env, "%s sets no Config field", s.Env)
			continue
		}
		require.NotNil(t, s.set, "%s has no parser", s.Env)
		assert.Contains(t, fields, s.Field, "%s: Config has no field %s", s.Env, s.Field)
		if other, dup := defined[s.Field]; dup {
			t.Errorf("Config.%s is set by %s and by %s", s.Field, other, s.Env)
		}
		defined[s.Field] = s.Env
	}
	for _, f := range fields {
		if _, ok := defined[f]; !ok && !slices.Contains(codeOnlyFields, f) {
			t.Errorf("Config.%s has no setting: add it to Settings (settings.go)", f)
		}
	}
}

// Each setting's text reaches its field: Load with the setting's variable alone changes the
// configuration, and LogValue names every field's setting by its file key.
func TestEverySettingLoads(t *testing.T) {
	t.Parallel()
	sample := map[Kind]string{KindString: "x1", KindInt: "7", KindDuration: "7s", KindBool: "true", KindList: "a1,b1"}
	keys := map[string]bool{}
	for _, a := range Defaults().LogAttrs() {
		keys[a.Key] = true
	}
	for _, s := range Settings {
		if s.Field == "" {
			continue
		}
		assert.True(t, keys[FileKey(s.Env)], "LogValue lacks %s", FileKey(s.Env))
		v := sample[s.Kind]
		switch s.Env {
		case "COORDINATOR_DATABASES":
			v = "billing=postgres://h/b"
		case "COORDINATOR_STATEMENTS":
			v = `{"a": "SELECT 1"}`
		case "COORDINATOR_TOKENS":
			v = "ci:submit:0123456789abcdef0123"
		case "COORDINATOR_TOPICS":
			v = "orders"
		case "COORDINATOR_SHARED_SQL":
			v = "false" // on by default
		case "COORDINATOR_DEFER_ROWS":
			v = "true" // off by default
		}
		c, err := Load(func(k string) string {
			if k == s.Env {
				return v
			}
			return ""
		})
		require.NoError(t, err, s.Env)
		assert.NotEqual(t, Defaults(), c, "%s=%s changed nothing", s.Env, v)
	}
}
