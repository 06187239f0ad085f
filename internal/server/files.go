package server

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// Files in and out of an environment's view (Host.ReadFile and the
// others; paths resolve inside the view, docs/api.md).

var (
	pPath      = param{name: "path", typ: "string", desc: "an absolute path as the environment's commands see it (resolved inside its view)"}
	pMode      = param{name: "mode", typ: "string", desc: "permissions in octal, e.g. 0644 (default: an existing file's, else 0644; a directory's 0755)"}
	pDepth     = param{name: "depth", typ: "integer", desc: "levels to list: 1 (default) its entries, 0 the whole tree"}
	pRecursive = param{name: "recursive", typ: "boolean", desc: "1: watch the directories below it too"}
)

func fileParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" || p[0] != '/' {
		return "", invalid("path %q: give an absolute path in the environment, e.g. /work/project/main.go", p)
	}
	return p, nil
}

func modeParam(r *http.Request, def os.FileMode) (os.FileMode, error) {
	v := r.URL.Query().Get("mode")
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 8, 32)
	if err != nil || n > 0o777 || n == 0 {
		return 0, invalid("mode %q: give permissions in octal, e.g. 0644", v)
	}
	return os.FileMode(n), nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := fileParam(r)
	if err != nil {
		return nil, err
	}
	f, err := s.h.ReadFile(r.Context(), r.PathValue("id"), p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, invalid("%s is a directory: list it with GET /v1/envs/{id}/dir", p)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f) // a client that leaves ends it
	return nil, nil
}

// writeFile streams the body into the file: it is not a JSON body, so
// MaxBody does not bound it; the request's context does.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := fileParam(r)
	if err != nil {
		return nil, err
	}
	mode, err := modeParam(r, 0)
	if err != nil {
		return nil, err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	return s.h.WriteFile(r.Context(), r.PathValue("id"), p, r.Body, mode)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := fileParam(r)
	if err != nil {
		return nil, err
	}
	mode, err := modeParam(r, 0o755)
	if err != nil {
		return nil, err
	}
	if err := s.h.Mkdir(r.Context(), r.PathValue("id"), p, mode); err != nil {
		return nil, err
	}
	return s.h.Stat(r.Context(), r.PathValue("id"), p)
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := fileParam(r)
	if err != nil {
		return nil, err
	}
	return s.h.Stat(r.Context(), r.PathValue("id"), p)
}

func (s *Server) readDir(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := fileParam(r)
	if err != nil {
		return nil, err
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		if depth, err = strconv.Atoi(v); err != nil || depth < 0 {
			return nil, invalid("depth %q: give 1 for the entries, more for levels below, 0 for the whole tree", v)
		}
	}
	return s.h.ReadDir(r.Context(), r.PathValue("id"), p, depth)
}

func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := fileParam(r)
	if err != nil {
		return nil, err
	}
	recursive, err := flag(r, "recursive", false)
	if err != nil {
		return nil, err
	}
	// The directory must be there before the answer starts.
	if _, err := s.h.Stat(r.Context(), r.PathValue("id"), p); err != nil {
		return nil, err
	}
	ctx, cancel := s.streamContext(r)
	defer cancel()
	streamNDJSON(s, ctx, w, "watch", s.h.Watch(ctx, r.PathValue("id"), p, recursive))
	return nil, nil
}
