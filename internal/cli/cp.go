package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
)

// envPath splits "ENV:PATH" (ENV without a slash, PATH absolute); ok is
// false for a host path (write ./a:b for a host name with a colon).
func envPath(arg string) (env, p string, ok bool) {
	env, p, found := strings.Cut(arg, ":")
	if !found || env == "" || strings.Contains(env, "/") {
		return "", "", false
	}
	return env, p, true
}

func newCpCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "cp ENV:PATH DEST | cp SRC ENV:PATH",
		Short: "Copy files and directories out of or into an environment's view",
		Long: `cp copies a file or a directory tree between the host and an environment, like
docker cp. ENV:PATH names a path as the environment's commands see it: in an
environment with a view it is resolved inside the view (from the root of its
mount namespace, through its keeper) and never leaves it — ".." and absolute
symbolic links stop at the view's root — so what the view hides is never read
or written. Files are written as the environment's user, whole (a reader
sees the old or the new content), and a symbolic link at the destination is
replaced, never written through.

A directory is copied to DEST/NAME when DEST is an existing directory, else to
DEST itself; so is a file. DEST's directory must exist. "-" as SRC reads
stdin, as DEST writes stdout (a file only). Symbolic links are copied out as
links; copying in, they are skipped and listed on stderr.`,
		Args: exactArgs(2, "a source and a destination, one of them ENV:PATH"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			srcEnv, src, srcIn := envPath(args[0])
			dstEnv, dst, dstIn := envPath(args[1])
			switch {
			case srcIn == dstIn:
				return usageErr("cp copies between the host and an environment: give ENV:PATH as exactly one of the two (e.g. hostfork cp ENV:/work/out.txt . or hostfork cp ./in.txt ENV:/work/)")
			case srcIn && !strings.HasPrefix(src, "/"), dstIn && !strings.HasPrefix(dst, "/"):
				return usageErr("ENV:PATH needs an absolute PATH, e.g. %s:/work/project", cmp.Or(srcEnv, dstEnv))
			}
			env, err := resolveEnv(c.Context(), h, cmp.Or(srcEnv, dstEnv))
			if err != nil {
				return err
			}
			cp := &copier{ctx: c.Context(), h: h, errw: c.ErrOrStderr(), stdout: g.out}
			if srcIn {
				return pathErr(cp.out(env, src, args[1]))
			}
			return pathErr(cp.in(args[0], env, dst))
		}),
	}
	return c
}

// resolveEnv resolves an environment's id (prefix), so that a missing one
// reads as a missing id, not a missing path.
func resolveEnv(ctx context.Context, h backend, prefix string) (string, error) {
	kind, id, err := h.Resolve(ctx, prefix)
	if err != nil {
		return "", err
	}
	if kind != "env" {
		return "", fmt.Errorf("%s is a command; name its environment: %w", id, api.ErrNotFound)
	}
	return id, nil
}

// pathError is a failure about a path (cp, ls): its message says what is
// missing and how to make it; no id hint is added.
type pathError struct{ error }

func (e pathError) Unwrap() error { return e.error }

func pathErr(err error) error {
	if err == nil {
		return nil
	}
	return pathError{err}
}

type copier struct {
	ctx    context.Context
	h      backend
	errw   io.Writer
	stdout io.Writer
}

// out copies env:src to the host path dst.
func (c *copier) out(env, src, dst string) error {
	st, err := c.h.Stat(c.ctx, env, src)
	if err != nil {
		return err
	}
	if dst == "-" {
		if st.Type != "file" {
			return usageErr("%s:%s is a %s; only a file can be written to stdout", env, src, st.Type)
		}
		return c.fileOut(env, src, c.stdout)
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(path.Clean(src)))
	} else if _, err := os.Stat(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("%s: the directory %s does not exist; create it first (mkdir -p %s): %w", dst, filepath.Dir(dst), filepath.Dir(dst), api.ErrNotFound)
	}
	if st.Type != "dir" {
		return c.fileOutPath(env, src, dst, modeOf(st))
	}
	if err := os.Mkdir(dst, modeOf(st)|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	es, err := c.h.ReadDir(c.ctx, env, src, 0)
	if err != nil {
		return err
	}
	for _, e := range es {
		to := filepath.Join(dst, filepath.FromSlash(e.Path))
		switch e.Type {
		case "dir":
			if err := os.Mkdir(to, modeOf(e)|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case "file":
			if err := c.fileOutPath(env, path.Join(src, e.Path), to, modeOf(e)); err != nil {
				return err
			}
		case "symlink":
			if err := os.Symlink(e.Target, to); err != nil {
				return err
			}
		default:
			fmt.Fprintf(c.errw, "hostfork cp: skipped %s:%s (not a file, directory or link)\n", env, path.Join(src, e.Path))
		}
	}
	return nil
}

func (c *copier) fileOut(env, src string, w io.Writer) error {
	r, err := c.h.OpenFile(c.ctx, env, src)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}

func (c *copier) fileOutPath(env, src, dst string, mode os.FileMode) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if err := c.fileOut(env, src, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// modeOf reads the permission bits of e.Mode (os.FileMode's String: type
// and flag letters, or "-" for a plain file, then the nine rwx places).
func modeOf(e hostfork.DirEntry) os.FileMode {
	var m os.FileMode
	perm := e.Mode
	if len(perm) >= 9 {
		perm = perm[len(perm)-9:]
	}
	for i, c := range perm {
		if c != '-' {
			m |= 1 << (8 - i)
		}
	}
	return cmp.Or(m, 0o644)
}

// in copies the host path src to env:dst.
func (c *copier) in(src, env, dst string) error {
	if src == "-" {
		_, err := c.h.WriteFile(c.ctx, env, dst, os.Stdin, 0)
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st, err := c.h.Stat(c.ctx, env, dst); err == nil && st.Type == "dir" {
		dst = path.Join(dst, filepath.Base(filepath.Clean(src)))
	} else if err != nil && !errors.Is(err, api.ErrNotFound) {
		return err
	}
	if !fi.IsDir() {
		return c.fileIn(src, env, dst, fi.Mode().Perm())
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if err := c.h.Mkdir(c.ctx, env, to, info.Mode().Perm()|0o700); err != nil && !errors.Is(err, api.ErrExists) {
				return err
			}
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return c.fileIn(p, env, to, info.Mode().Perm())
		default:
			fmt.Fprintf(c.errw, "hostfork cp: skipped %s (a symbolic link or special file)\n", p)
		}
		return nil
	})
}

func (c *copier) fileIn(src, env, dst string, perm os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = c.h.WriteFile(c.ctx, env, dst, f, perm)
	return err
}

func newLsCmd(g *globals) *cobra.Command {
	var depth int
	var recursive, asJSON bool
	c := &cobra.Command{
		Use:   "ls ENV PATH",
		Short: "List a directory of an environment's view",
		Long: `ls lists the directory PATH as environment ENV's commands see it (resolved inside
its view, like cp): mode, size, modification time and name, a symbolic link
with its target (never followed). -R lists the whole tree, --depth N that many
levels.`,
		Args: exactArgs(2, "an environment id and an absolute path"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			if !strings.HasPrefix(args[1], "/") {
				return usageErr("ls needs an absolute PATH as the environment sees it, e.g. /work/project")
			}
			if recursive {
				depth = 0
			}
			env, err := resolveEnv(c.Context(), h, args[0])
			if err != nil {
				return err
			}
			st, err := h.Stat(c.Context(), env, args[1])
			if err != nil {
				return pathErr(err)
			}
			es := []hostfork.DirEntry{st} // a file is listed alone, as ls does
			if st.Type == "dir" {
				if es, err = h.ReadDir(c.Context(), env, args[1], depth); err != nil {
					return pathErr(err)
				}
			}
			if es == nil {
				es = []hostfork.DirEntry{}
			}
			if asJSON {
				return printJSON(g.out, es)
			}
			for _, e := range es {
				name := e.Path
				if e.Target != "" {
					name += " -> " + e.Target
				}
				if _, err := fmt.Fprintf(g.out, "%s %10d %s %s\n", e.Mode, e.Size, e.ModTime.Local().Format("2006-01-02 15:04"), name); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	c.Flags().IntVar(&depth, "depth", 1, "levels to list (1: the entries; 0: the whole tree)")
	c.Flags().BoolVarP(&recursive, "recursive", "R", false, "list the whole tree (--depth 0)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the entries as a JSON array")
	return c
}
