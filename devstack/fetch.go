package devstack

import (
	"archive/tar"
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/ulikunitz/xz"
)

// A PostgreSQL build for machines without one: the binaries Go and Java projects embed
// (github.com/fergusstrange/embedded-postgres, zonky's embedded-postgres), published on Maven
// Central as io.zonky.test.postgres:embedded-postgres-binaries-<os>-<arch>: a jar holding one
// .txz with bin/, lib/ and share/ of a relocatable server build.
//
// embedded-postgres itself is not used: it runs initdb and pg_ctl as the current user, which
// PostgreSQL refuses for root (and its download is not exported apart from that), while
// StartPostgres already runs any server binaries as an unprivileged user. So the same
// artifact is fetched here, checked against a pinned SHA-256, and cached.

const (
	// PostgresVersion is the version fetched when no local server is found.
	PostgresVersion = "17.5.0"
	// MavenCentral is the default repository of the binaries.
	MavenCentral = "https://repo1.maven.org/maven2"

	fetchTimeout = 10 * time.Minute
	maxJarBytes  = 256 << 20
	completeMark = ".complete"
)

// pinnedSHA256 are the SHA-256 sums of the jars of PostgresVersion. A platform without one
// is checked against the repository's own .sha256 file.
var pinnedSHA256 = map[string]string{
	"linux-amd64":    "646f3269075d1a23904127374e3cdbcef96beb32979fedee25d835877400fcbe",
	"linux-arm64v8":  "e02f27ff50ff2d90b6541d54f3f108505aacd84ea53c2890e976a684bfea2752",
	"darwin-amd64":   "fb70f783928e77c3d6ef5ca8ed644f1ac502f740fcfc032a375c8347820f2bdd",
	"darwin-arm64v8": "e9d3398e10c2ec926395498b03e75ad1a24eeaed82895e756a7e173b202cf6de",
}

// platform is the artifact's os-arch, as the binaries are named.
func platform() (string, error) {
	arch := runtime.GOARCH
	switch arch {
	case "amd64", "ppc64le":
	case "arm64":
		arch = "arm64v8"
	case "386":
		arch = "i386"
	default:
		return "", fmt.Errorf("no PostgreSQL build is published for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	switch runtime.GOOS {
	case "linux", "darwin":
	default:
		return "", fmt.Errorf("no PostgreSQL build is published for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	return runtime.GOOS + "-" + arch, nil
}

// cacheDir is where fetched builds are kept: the user's cache directory (XDG_CACHE_HOME or
// ~/.cache on Linux), or /var/cache when running as root and the user PostgreSQL runs as
// cannot reach the former (root's home is private).
func cacheDir(as *runAs) (string, error) {
	base, err := os.UserCacheDir()
	if err == nil {
		dir := filepath.Join(base, "kpgtx", "postgres")
		if as == nil || reachable(dir, as) {
			return dir, nil
		}
	}
	if as != nil {
		return filepath.Join("/var/cache", "kpgtx", "postgres"), nil
	}
	return "", fmt.Errorf("postgres: no cache directory for the PostgreSQL build: %w", err)
}

// reachable reports whether the user can search every existing directory on the way to dir.
func reachable(dir string, as *runAs) bool {
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil && !traversable(p, as) {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// fetchPostgres returns the bin directory of a cached PostgreSQL build, downloading and
// unpacking it first when it is not cached yet. The build is unpacked beside its final place
// and renamed into it, so a run that stops half-way leaves nothing that looks complete, and
// concurrent runs do not see each other's half.
func fetchPostgres(ctx context.Context, repo, cache string, as *runAs, logger *slog.Logger) (string, error) {
	plat, err := platform()
	if err != nil {
		return "", fmt.Errorf("postgres: %w; %s", err, installHint)
	}
	final := filepath.Join(cache, "postgresql-"+PostgresVersion+"-"+plat)
	binDir := filepath.Join(final, "bin")
	if _, err := os.Stat(filepath.Join(final, completeMark)); err == nil {
		return binDir, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("postgres: cache directory: %w", err)
	}
	if as != nil { // the unprivileged user must reach the binaries
		for p := cache; p != filepath.Dir(p) && !traversable(p, as); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				return "", fmt.Errorf("postgres: make %s reachable by %s: %w", p, as.name, err)
			}
		}
	}
	artifact := "embedded-postgres-binaries-" + plat
	url := fmt.Sprintf("%s/io/zonky/test/postgres/%s/%s/%s-%s.jar", strings.TrimRight(repo, "/"), artifact, PostgresVersion, artifact, PostgresVersion)
	began := time.Now()
	logger.Info("devstack: no local PostgreSQL server; fetching a build (once: it is cached)", "url", url, "cache", final)

	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	jar, err := os.CreateTemp(cache, "download-*.jar")
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer os.Remove(jar.Name())
	defer jar.Close()
	sum, size, err := download(ctx, url, jar)
	if err != nil {
		return "", fmt.Errorf("postgres: download %s: %w (%s)", url, err, installHint)
	}
	want, ok := pinnedSHA256[plat]
	if !ok {
		if want, err = fetchText(ctx, url+".sha256"); err != nil {
			return "", fmt.Errorf("postgres: checksum of %s: %w", url, err)
		}
	}
	if sum != want {
		return "", fmt.Errorf("postgres: %s: SHA-256 %s, want %s: the download is corrupt or not the published build", url, sum, want)
	}

	tmp, err := os.MkdirTemp(cache, "unpack-")
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := unpackJar(jar, size, tmp); err != nil {
		return "", fmt.Errorf("postgres: unpack %s: %w", url, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, completeMark), []byte(url+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another run got there first: use its copy if it is complete.
		if _, serr := os.Stat(filepath.Join(final, completeMark)); serr != nil {
			return "", fmt.Errorf("postgres: move the build into the cache: %w", err)
		}
	}
	logger.Info("devstack: PostgreSQL build cached", "dir", final, "bytes", size, "duration_ms", time.Since(began).Milliseconds())
	return binDir, nil
}

// download writes url's body to w and returns its SHA-256 (hex) and size.
func download(ctx context.Context, url string, w io.Writer) (string, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("HTTP %s", resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(resp.Body, maxJarBytes+1))
	if err != nil {
		return "", 0, err
	}
	if n > maxJarBytes {
		return "", 0, fmt.Errorf("larger than %d bytes", maxJarBytes)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func fetchText(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return "", errors.New("empty checksum file")
	}
	return strings.ToLower(fields[0]), nil
}

// unpackJar extracts the .txz inside the jar (a zip) into dir.
func unpackJar(jar io.ReaderAt, size int64, dir string) error {
	zr, err := zip.NewReader(jar, size)
	if err != nil {
		return err
	}
	for _, f := range zr.File {
		if f.FileInfo().IsDir() || !strings.HasSuffix(f.Name, ".txz") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		defer rc.Close()
		xr, err := xz.NewReader(rc)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		return untar(tar.NewReader(xr), dir)
	}
	return errors.New("no .txz archive in the jar")
}

// untar writes the archive's directories, regular files and symbolic links under dir,
// refusing any path or link that would leave it.
func untar(tr *tar.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm()|0o444)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeSymlink:
			target := filepath.Join(filepath.Dir(name), h.Linkname)
			if filepath.IsAbs(h.Linkname) || !filepath.IsLocal(target) {
				return fmt.Errorf("archive link %q → %q leaves the directory", h.Name, h.Linkname)
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("archive entry %q: unsupported type %q", h.Name, h.Typeflag)
		}
	}
}
