package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/glossary.md stays true: every rule label defined in the design documents is listed, every
// label listed is defined, and every Go name it gives for where a rule is enforced exists.
func TestGlossary(t *testing.T) {
	t.Parallel()
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join("..", path))
		require.NoError(t, err)
		return string(b)
	}
	glossary := read("docs/glossary.md")
	defs := read("docs/design.md") + read("docs/batching.md")

	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`\*\*([IBSDCHPROX]\d+)\b|\| (S\d) \||\*\*H1,`).FindAllStringSubmatch(defs, -1) {
		switch {
		case m[1] != "":
			defined[m[1]] = true
		case m[2] != "":
			defined[m[2]] = true
		default:
			defined["H1"] = true
		}
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([IBSDCHPROX]\d+) \|`).FindAllStringSubmatch(glossary, -1) {
		listed[m[1]] = true
	}
	for l := range defined {
		assert.True(t, listed[l], "%s is defined in the design but not in docs/glossary.md", l)
	}
	for l := range listed {
		assert.True(t, defined[l], "docs/glossary.md lists %s, which no design document defines", l)
	}

	names := map[string]map[string]bool{} // package directory → its declared names and methods
	declared := func(pkg string) map[string]bool {
		if n, ok := names[pkg]; ok {
			return n
		}
		n := map[string]bool{}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, filepath.Join("..", pkg), func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, 0)
		require.NoError(t, err, pkg)
		for _, p := range pkgs {
			for _, f := range p.Files {
				for _, d := range f.Decls {
					switch d := d.(type) {
					case *ast.FuncDecl:
						n[d.Name.Name] = true
					case *ast.GenDecl:
						for _, s := range d.Specs {
							switch s := s.(type) {
							case *ast.TypeSpec:
								n[s.Name.Name] = true
							case *ast.ValueSpec:
								for _, id := range s.Names {
									n[id.Name] = true
								}
							}
						}
					}
				}
			}
		}
		names[pkg] = n
		return n
	}
	refs := regexp.MustCompile("`((?:coord|kafkatxn|sqltxn|sqlpolicy|txlog|recovery|retention|service|client|registry|api)(?:\\.[A-Za-z]\\w*)+)`").FindAllStringSubmatch(glossary, -1)
	require.NotEmpty(t, refs)
	for _, m := range refs {
		parts := strings.Split(m[1], ".")
		n := declared(parts[0])
		for _, name := range parts[1:] {
			assert.True(t, n[name], "docs/glossary.md names %s: %s is not declared in %s/", m[1], name, parts[0])
		}
	}
}

// The layout table of docs/design.md section 7 covers every folder of the repository: each
// top-level folder has a row of its own or rows under it, and each Go package sits under a row.
func TestLayoutCoversEveryFolder(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/design.md")
	require.NoError(t, err)
	design := string(b)
	start := strings.Index(design, "## 7. Layout")
	require.GreaterOrEqual(t, start, 0, "docs/design.md has its layout section")
	section := design[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+/)` \\|").FindAllStringSubmatch(section, -1) {
		rows = append(rows, m[1])
	}
	require.NotEmpty(t, rows)
	covered := func(dir string) bool {
		for _, r := range rows {
			if strings.HasPrefix(dir+"/", r) || strings.HasPrefix(r, dir+"/") {
				return true
			}
		}
		return false
	}
	entries, err := os.ReadDir("..")
	require.NoError(t, err)
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == ".git" || (strings.HasPrefix(name, ".") && name != ".ci") {
			continue
		}
		assert.True(t, covered(name), "docs/design.md's layout has no row for %s/", name)
	}
	reported := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != ".") || d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || rel == "." {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, r := range rows {
			if strings.HasPrefix(dir+"/", r) {
				return nil
			}
		}
		if !reported[dir] {
			reported[dir] = true
			t.Errorf("docs/design.md's layout has no row over the Go package in %s/", dir)
		}
		return nil
	})
	require.NoError(t, err)
}
