// Package serve is framepack's web app: a page and an HTTP API over a
// farm's queue. The API (documented as OpenAPI 3 at /api/openapi.json)
// submits jobs with their images, lists and cancels them, moves them up
// the queue, streams their live progress as server-sent events and serves
// their videos and settings files. The page, embedded in the binary, uses
// only the API.
//
// Serving is safe to expose with a token: every API call needs it in the
// Authorization header (a cross-site page cannot set one); without a token
// it serves loopback clients only, and refuses requests from another
// origin or for another host name, so that no web page a local browser
// opens can start a job.
package serve

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/video"
)

//go:embed web openapi.json
var assets embed.FS

// Config configures a Server.
type Config struct {
	Farm *farm.Farm
	// Token, when set, is required of every API call (Authorization:
	// Bearer TOKEN).
	Token string
	// LoopbackOnly refuses requests whose Host is not a loopback name
	// (against DNS rebinding); set when serving loopback without a token.
	LoopbackOnly bool
	// Defaults are the settings a job starts from.
	Defaults farm.Settings
	// TinyModel: the built-in tiny model runs (the page says so).
	TinyModel bool
	// Model describes the models (a folder), Device the compute device.
	Model, Device string
	// LoRADir is the folder of the LoRAs jobs may name.
	LoRADir string
	// MaxUpload caps a submission's body in bytes (32 MiB when 0).
	MaxUpload int64
	// MaxQueued caps the jobs waiting (100 when 0).
	MaxQueued int
	// Workers is how many workers this process runs (shown by health).
	Workers int
	// Version is the build, for health.
	Version string
	Log     *slog.Logger
}

// Server serves the page and the API.
type Server struct {
	cfg Config
	f   *farm.Farm
	hub *hub
	log *slog.Logger
	mux *http.ServeMux
	// routeList is the API's routes ("GET /api/jobs"), each documented
	// in openapi.json.
	routeList []string

	workersMu sync.Mutex
	workers   []*farm.WorkerInfo // the live workers at workersAt
	workersAt time.Time
}

// New makes a server and starts following the farm's jobs.
func New(cfg Config) (*Server, error) {
	if cfg.Farm == nil {
		return nil, errors.New("serve: no farm")
	}
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = 32 << 20
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = 100
	}
	// The defaults name the cache and carry MagCache's knobs and the
	// video's context frames, for the form.
	def, d := framepack.DefaultRequest(), &cfg.Defaults
	if d.Cache == "" {
		d.Cache = framepack.CacheNone
		if d.TeaCache {
			d.Cache = framepack.CacheTeaCache
		}
	}
	if d.MagCacheK == nil {
		d.MagCacheK = &def.MagCacheK
	}
	if d.MagCacheRetention == nil {
		d.MagCacheRetention = &def.MagCacheRetention
	}
	if d.VideoContextFrames == 0 {
		d.VideoContextFrames = def.VideoContextFrames
	}
	s := &Server{cfg: cfg, f: cfg.Farm, log: cfg.Log, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	var err error
	if s.hub, err = newHub(cfg.Farm); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Close stops following the farm.
func (s *Server) Close() { s.hub.close() }

func (s *Server) routes() {
	web, _ := fs.Sub(assets, "web")
	static := http.FileServerFS(web)
	s.mux.Handle("GET /{$}", static)
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets", static))
	api := func(pattern string, h http.HandlerFunc) {
		s.routeList = append(s.routeList, pattern)
		s.mux.Handle(pattern, s.apiGuard(h))
	}
	api("GET /api/openapi.json", s.openAPI)
	api("GET /api/health", s.health)
	api("GET /api/workers", s.listWorkers)
	api("GET /api/options", s.options)
	api("GET /api/events", s.allEvents)
	api("POST /api/jobs", s.submit)
	api("GET /api/jobs", s.listJobs)
	api("GET /api/jobs/{id}", s.getJob)
	api("DELETE /api/jobs/{id}", s.deleteJob)
	api("POST /api/jobs/{id}/up", s.moveUp)
	api("GET /api/jobs/{id}/events", s.jobEvents)
	api("GET /api/jobs/{id}/video", s.file(farm.FileVideo, "video/mp4"))
	api("GET /api/jobs/{id}/video/partial", s.file(farm.FilePartial, "video/mp4"))
	api("GET /api/jobs/{id}/settings", s.file(farm.FileSettings, "application/json"))
	api("GET /api/jobs/{id}/image", s.file(farm.FileImage, ""))
	api("GET /api/jobs/{id}/end-image", s.file(farm.FileEndImage, ""))
	api("GET /api/jobs/{id}/input-video", s.file(farm.FileInputVideo, ""))
	api("GET /api/jobs/{id}/thumbnail", s.thumbnail)
	s.mux.Handle("/api/", s.apiGuard(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no API route %s %s (see /api/openapi.json)", r.Method, r.URL.Path))
	}))
}

// ServeHTTP serves the page and the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; "+
		"style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	if s.cfg.LoopbackOnly && !loopbackHost(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q refused: this server answers loopback names only (start it with --token to serve others)", r.Host))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// loopbackHost tells whether a Host header names this machine's loopback.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiGuard refuses cross-origin requests and, with a token, requests
// without it.
func (s *Server) apiGuard(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !strings.EqualFold(u.Host, r.Host) {
				writeError(w, http.StatusForbidden, fmt.Sprintf("cross-origin request from %q refused", o))
				return
			}
		}
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			writeError(w, http.StatusForbidden, "cross-site request refused")
			return
		}
		if s.cfg.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.cfg.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="framepack"`)
				msg := "this server needs its token: send Authorization: Bearer TOKEN"
				if ok {
					msg = "wrong token"
				}
				writeError(w, http.StatusUnauthorized, msg)
				return
			}
		}
		h(w, r)
	})
}

// apiError is every error's body.
type apiError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: msg, Status: status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response","status":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	b, _ := assets.ReadFile("openapi.json")
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// health is GET /api/health.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	stored, err := s.f.StoredBytes(ctx)
	status, code := "ok", http.StatusOK
	if err != nil {
		status, code = "the file store does not answer: "+err.Error(), http.StatusServiceUnavailable
	}
	nats := "embedded"
	if !s.f.Embedded() {
		nats = "external"
	}
	live, _ := s.liveWorkers(ctx)
	writeJSON(w, code, map[string]any{"status": status, "version": s.cfg.Version, "model": s.cfg.Model, "tiny_model": s.cfg.TinyModel,
		"device": s.cfg.Device, "nats": nats, "replicas": s.f.Replicas(), "workers": s.cfg.Workers, "live_workers": len(live),
		"jobs": s.hub.counts(), "stored_bytes": stored, "max_stored_bytes": s.f.MaxStoredBytes()})
}

// listWorkers is GET /api/workers.
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) {
	live, err := s.liveWorkers(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if live == nil {
		live = []*farm.WorkerInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": live})
}

// liveWorkers is the farm's live workers, read at most once a second.
func (s *Server) liveWorkers(ctx context.Context) ([]*farm.WorkerInfo, error) {
	s.workersMu.Lock()
	defer s.workersMu.Unlock()
	if time.Since(s.workersAt) < time.Second {
		return s.workers, nil
	}
	live, err := s.f.Workers(ctx)
	if err != nil {
		return nil, err
	}
	s.workers, s.workersAt = live, time.Now()
	return live, nil
}

// options is GET /api/options: what the page's form offers.
func (s *Server) options(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"defaults": s.cfg.Defaults, "loras": loraNames(s.cfg.LoRADir),
		"tiny_model": s.cfg.TinyModel, "model": s.cfg.Model, "device": s.cfg.Device, "caches": framepack.Caches,
		"video_input": video.HaveFFmpeg(),
		"limits": map[string]any{"max_upload_bytes": s.cfg.MaxUpload, "max_queued": s.cfg.MaxQueued,
			"max_stored_bytes": s.f.MaxStoredBytes()}})
}

func itoa(n int) string { return strconv.Itoa(n) }
