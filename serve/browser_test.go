package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// screenshotDir is where the browser test writes its screenshots:
// $FRAMEPACK_SCREENSHOTS, else a temporary folder.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("FRAMEPACK_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// pageState is what the test reads of the page at each poll.
type pageState struct {
	Stage          string  `json:"stage"`
	Progress       float64 `json:"progress"`
	PreviewUpdates int     `json:"previewUpdates"`
	Preview        string  `json:"preview"`
	VideoPath      string  `json:"videoPath"`
	VideoDuration  float64 `json:"videoDuration"`
	VideoReady     int     `json:"videoReady"`
}

const readPage = `(() => {
  const v = document.querySelector("#live-video");
  return {
    stage: document.querySelector("#stage").textContent,
    progress: document.querySelector("#progress").value,
    previewUpdates: parseInt(document.querySelector("#preview").dataset.updates, 10),
    preview: document.querySelector("#preview").src.slice(-64),
    videoPath: v.dataset.path || "",
    videoDuration: isFinite(v.duration) ? v.duration : 0,
    videoReady: v.readyState,
  };
})()`

// The page, driven in Debian's chromium as a user would: upload the image,
// type a prompt, start; the progress advances and the preview changes at
// every step; the finished video plays in the page at its length; more
// jobs are queued (one extending that video with MagCache), moved and
// cancelled; "use these settings" fills the form.
func TestBrowser(t *testing.T) {
	t.Parallel() // its own server and queue
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (scripts/setup.sh installs it): the page cannot be tested")
	}
	e := newEnv(t, envOptions{})
	shots := screenshotDir(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1400))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()

	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	evalIn := func(ctx context.Context, js string, out any) {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if out != nil {
			if err := json.Unmarshal(v, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	eval := func(js string, out any) {
		t.Helper()
		evalIn(ctx, js, out)
	}
	// until polls the page until cond holds.
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("the page never showed %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	shot := func(name string) {
		t.Helper()
		b, err := chromedp.Run(ctx, chromedp.FullScreenshot(85))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setValue := func(sel, v string) {
		t.Helper()
		eval(fmt.Sprintf(`(() => { const el = document.querySelector(%q); el.value = %q; el.dispatchEvent(new Event("input")); return true })()`, sel, v), nil)
	}
	click := func(sel string) {
		t.Helper()
		var ok bool
		eval(fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false; el.click(); return true })()`, sel), &ok)
		if !ok {
			t.Fatalf("no %s on the page", sel)
		}
	}

	do(chromedp.Navigate(e.url), chromedp.WaitVisible(chromedp.CSS("#job-form")))
	until("the defaults filled in", func() bool {
		var s string
		eval(`document.querySelector("#steps").value`, &s)
		return s != ""
	})
	var tinyBanner bool
	eval(`!document.querySelector("#tiny-banner").hidden`, &tinyBanner)
	if !tinyBanner {
		t.Error("the page does not say the tiny model runs")
	}
	scene, _ := filepath.Abs(filepath.Join("..", "testdata", "images", "scene.png"))
	do(chromedp.SetUploadFiles(chromedp.CSS("#image"), []string{scene}))
	eval(`document.querySelector("#image").dispatchEvent(new Event("change")); true`, nil)
	do(chromedp.SendKeys(chromedp.CSS("#prompt"), "a red kite over green hills"))
	setValue("#seconds", "1.2")
	setValue("#steps", "2")
	setValue("#window", "3")
	setValue("#resolution", "64")
	setValue("#seed", "5")
	click("#start")

	// Progress and previews while it runs, then the video.
	var st pageState
	progress := map[float64]bool{}
	previews := map[string]bool{}
	shotRunning := false
	until("the finished video", func() bool {
		eval(readPage, &st)
		progress[st.Progress] = true
		if st.Preview != "" {
			previews[st.Preview] = true
		}
		if !shotRunning && st.PreviewUpdates > 2 {
			shot("serve-running.jpg")
			shotRunning = true
			// A second tab opened now shows the same running job, live.
			tab, closeTab := chromedp.NewContext(ctx)
			if err := chromedp.Do(tab, chromedp.Navigate(e.url)); err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(time.Minute)
			for {
				var other pageState
				evalIn(tab, readPage, &other)
				if strings.HasPrefix(other.Stage, "Section") && other.PreviewUpdates >= 1 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("a second tab does not show the running job: %+v", other)
				}
				time.Sleep(50 * time.Millisecond)
			}
			closeTab()
		}
		return st.VideoPath != "" && !strings.Contains(st.VideoPath, "partial") && st.VideoReady >= 1 && st.VideoDuration > 0
	})
	if len(progress) < 3 {
		t.Errorf("the progress bar showed %d values, want it to advance", len(progress))
	}
	if st.PreviewUpdates < 4 || len(previews) < 2 {
		t.Errorf("the preview was updated %d times with %d distinct images", st.PreviewUpdates, len(previews))
	}
	if want := 37.0 / 30; math.Abs(st.VideoDuration-want) > 0.05 {
		t.Errorf("the page's video lasts %.3f s, want %.3f (37 frames at 30 fps)", st.VideoDuration, want)
	}
	until("the history card", func() bool {
		var n int
		eval(`document.querySelectorAll("#history .card").length`, &n)
		return n == 1
	})
	// The history plays its video when its thumbnail is clicked.
	click("#history .card .poster")
	until("the history card's video", func() bool {
		var d float64
		eval(`(() => { const v = document.querySelector("#history .card video"); return v && v.readyState >= 1 && isFinite(v.duration) ? v.duration : 0 })()`, &d)
		return math.Abs(d-37.0/30) < 0.05
	})
	shot("serve-done.jpg")

	// A long second job runs; a third and a fourth wait; the fourth moves
	// up, then both are cancelled from the queue, and the second from the
	// running panel.
	setValue("#seconds", "8")
	setValue("#steps", "20")
	click("#start")
	until("the second job running", func() bool {
		var n int
		eval(`document.querySelectorAll("#queue tr[data-status=running]").length`, &n)
		return n == 1
	})
	// The third extends the first job's video, with MagCache: its knobs
	// show once it is chosen, and the video takes the start image's place.
	setValue("#seconds", "1")
	setValue("#prompt", "third")
	var knobs bool
	eval(`!document.querySelector("#magcache-k").closest("label").hidden`, &knobs)
	if knobs {
		t.Error("MagCache's knobs show with TeaCache")
	}
	eval(`(() => { const el = document.querySelector("#cache"); el.value = "magcache"; el.dispatchEvent(new Event("change")); return true })()`, nil)
	eval(`!document.querySelector("#magcache-k").closest("label").hidden`, &knobs)
	if !knobs {
		t.Error("MagCache's knobs do not show with MagCache")
	}
	setValue("#magcache-k", "2")
	firstID := ""
	eval(`document.querySelector("#history .card").dataset.id`, &firstID)
	code, mp4 := e.do("GET", "/api/jobs/"+firstID+"/video", nil, nil)
	clip := filepath.Join(t.TempDir(), "clip.mp4")
	if code != 200 || os.WriteFile(clip, mp4, 0o644) != nil {
		t.Fatalf("the first job's video: %d", code)
	}
	do(chromedp.SetUploadFiles(chromedp.CSS("#video"), []string{clip}))
	eval(`document.querySelector("#video").dispatchEvent(new Event("change")); true`, nil)
	var mode struct{ ImageHidden, OptionsShown bool }
	eval(`({imageHidden: document.querySelector("#image-drop").hidden, optionsShown: !document.querySelector("#video-options").hidden})`, &mode)
	if !mode.ImageHidden || !mode.OptionsShown {
		t.Errorf("with a video chosen: %+v, want the start image hidden and the video's options shown", mode)
	}
	click("#start")
	until("the third job queued", func() bool {
		var n int
		eval(`document.querySelectorAll("#queue tr[data-status=queued]").length`, &n)
		return n == 1
	})
	until("the video job's row with its thumbnail", func() bool {
		var row struct {
			Settings string
			Thumb    int
		}
		eval(`(() => { const r = document.querySelector("#queue tr[data-status=queued]");
			return {settings: r.querySelector("td.settings").textContent, thumb: r.querySelector("img.thumb").naturalWidth} })()`, &row)
		return strings.Contains(row.Settings, "extends a video of 37 frames") && strings.Contains(row.Settings, "MagCache (K 2") && row.Thumb == 96
	})
	shot("serve-video.jpg")
	// The fourth is an image job again, with TeaCache.
	click("#video-clear")
	eval(`(() => { const el = document.querySelector("#cache"); el.value = "teacache"; el.dispatchEvent(new Event("change")); return true })()`, nil)
	setValue("#prompt", "fourth")
	click("#start")
	until("the fourth job queued", func() bool {
		var n int
		eval(`document.querySelectorAll("#queue tr[data-status=queued]").length`, &n)
		return n == 2
	})
	click(`#queue tr[data-status=queued] ~ tr[data-status=queued] .up`)
	until("the fourth job first in the queue", func() bool {
		var p string
		eval(`(document.querySelector("#queue tr[data-status=queued] td.prompt") || {}).textContent || ""`, &p)
		return p == "fourth"
	})
	shot("serve.jpg")
	for left := 1; left >= 0; left-- {
		click(`#queue tr[data-status=queued] .cancel`)
		until(fmt.Sprintf("%d queued jobs", left), func() bool {
			var n int
			eval(`document.querySelectorAll("#queue tr[data-status=queued]").length`, &n)
			return n == left
		})
	}
	click("#cancel-running")
	until("three cancelled jobs", func() bool {
		var n int
		eval(`document.querySelectorAll("#queue tr[data-status=cancelled]").length`, &n)
		return n == 3
	})

	// The third job's settings, as the page sent them.
	_, lb := e.do("GET", "/api/jobs?status=cancelled", nil, nil)
	var list struct{ Jobs []jobJSON }
	json.Unmarshal(lb, &list)
	third := false
	for _, j := range list.Jobs {
		if j.Settings.Prompt == "third" {
			third = true
			if j.Settings.Cache != "magcache" || j.Settings.MagCacheK == nil || *j.Settings.MagCacheK != 2 || j.Links["input_video"] == "" ||
				j.Settings.VideoContextFrames != 5 {
				t.Errorf("the video job's settings: %+v, links %v", j.Settings, j.Links)
			}
		} else if j.Settings.Cache != "teacache" || j.Links["image"] == "" {
			t.Errorf("job %q: cache %q, links %v", j.Settings.Prompt, j.Settings.Cache, j.Links)
		}
	}
	if !third {
		t.Error("no video job among the cancelled")
	}

	// "Use these settings" fills the form with the first job's.
	setValue("#prompt", "something else")
	setValue("#seconds", "3")
	click("#history .card .use")
	until("the form filled", func() bool {
		var f struct {
			Prompt, Seconds, Steps, Seed, Cache string
			Files, Videos                       int
		}
		eval(`({prompt: document.querySelector("#prompt").value, seconds: document.querySelector("#seconds").value,
			steps: document.querySelector("#steps").value, seed: document.querySelector("#seed").value,
			cache: document.querySelector("#cache").value, files: document.querySelector("#image").files.length,
			videos: document.querySelector("#video").files.length})`, &f)
		return f.Prompt == "a red kite over green hills" && f.Seconds == "1.2" && f.Steps == "2" && f.Seed == "5" && f.Files == 1 &&
			f.Cache == "teacache" && f.Videos == 0
	})
	// An image dropped on the end image's zone goes into its input.
	dropped, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(async () => {
		const id = document.querySelector("#history .card").dataset.id;
		const blob = await (await fetch("/api/jobs/" + id + "/image")).blob();
		const dt = new DataTransfer();
		dt.items.add(new File([blob], "dropped.png", {type: "image/png"}));
		document.querySelector("#end-image-drop").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
		const f = document.querySelector("#end-image").files;
		return f.length === 1 && f[0].name === "dropped.png" && !document.querySelector("#end-image-preview").hidden ? blob.size : 0;
	})()`, chromedp.EvalAwaitPromise))
	if err != nil || dropped == 0 {
		t.Errorf("dropping an image on the end image's zone: %v", err)
	}
	t.Logf("browser: preview updated %d times, video %.2f s, queue and cancel ok (screenshots in %s)", st.PreviewUpdates, st.VideoDuration, shots)
}

// With a token the page asks for it, and works once opened with
// #token=…, sending it in the Authorization header (the fragment never
// reaches the server).
func TestBrowserToken(t *testing.T) {
	t.Parallel() // its own server and queue
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (scripts/setup.sh installs it): the page cannot be tested")
	}
	e := newEnv(t, envOptions{noWorker: true, token: "tab-secret"})
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	read := func() (tokenBox bool, steps string) {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[!(document.querySelector("#token-box") || {hidden: true}).hidden, (document.querySelector("#steps") || {value: ""}).value]`))
		if err != nil {
			t.Fatal(err)
		}
		return v[0].(bool), v[1].(string)
	}
	wait := func(what string, cond func(bool, string) bool) {
		t.Helper()
		for end := time.Now().Add(time.Minute); !cond(read()); {
			if time.Now().After(end) {
				box, steps := read()
				dbg, _ := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[location.href, sessionStorage.getItem("framepack-token"), document.querySelector("#error").textContent, performance.getEntriesByType("navigation")[0].type, typeof headers === "function" ? JSON.stringify(headers()) : "no headers fn"]`))
				t.Fatalf("the page never showed %s (token box %v, steps %q; %v)", what, box, steps, dbg)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url)); err != nil {
		t.Fatal(err)
	}
	wait("the token box", func(box bool, steps string) bool { return box && steps == "" })
	// Opened afresh with the token in the address, as a shared link is.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(e.url+"/#token=tab-secret")); err != nil {
		t.Fatal(err)
	}
	wait("the defaults through the API", func(box bool, steps string) bool { return !box && steps == "2" })
}
