// Command chart draws the end-to-end throughput of streamq and of the raw
// go-redis baseline against handler concurrency, as a grouped bar chart PNG,
// from the JSON that streamq-bench -json writes. It uses only the standard
// library (a built-in 5x7 bitmap font), so it needs nothing to be installed:
//
//	go run ./docs/perf/chart -in docs/perf/results.json -out docs/perf/throughput.png
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"slices"
	"strings"
)

// result is the part of streamq-bench's JSON the chart reads.
type result struct {
	Scenario string  `json:"scenario"`
	Param    int     `json:"param"`
	Ratio    float64 `json:"ratio"`
	Streamq  struct {
		Median float64 `json:"median"`
	} `json:"streamq"`
	Baseline struct {
		Median float64 `json:"median"`
	} `json:"baseline"`
}

type report struct {
	GoVersion    string `json:"go_version"`
	NumCPU       int    `json:"num_cpu"`
	RedisVersion string `json:"redis_version"`
	Settings     map[string]string
	Results      []result `json:"results"`
}

// series is one bar colour.
type series struct {
	name  string
	col   color.RGBA
	value map[int]float64 // by concurrency
}

var (
	white     = color.RGBA{255, 255, 255, 255}
	black     = color.RGBA{20, 20, 20, 255}
	grid      = color.RGBA{225, 225, 225, 255}
	axis      = color.RGBA{90, 90, 90, 255}
	blue      = color.RGBA{31, 119, 180, 255}
	orange    = color.RGBA{255, 127, 14, 255}
	green     = color.RGBA{44, 160, 44, 255}
	greyLabel = color.RGBA{80, 80, 80, 255}
)

func main() {
	in := flag.String("in", "docs/perf/results.json", "streamq-bench -json output to read")
	out := flag.String("out", "docs/perf/throughput.png", "PNG file to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	sq := series{name: "streamq", col: blue, value: map[int]float64{}}
	bl := series{name: "baseline (raw go-redis)", col: orange, value: map[int]float64{}}
	mw := series{name: "streamq + middleware.Default", col: green, value: map[int]float64{}}
	ratios := map[int]float64{}
	var conc []int
	for _, r := range rep.Results {
		switch r.Scenario {
		case "e2e":
			sq.value[r.Param] = r.Streamq.Median
			bl.value[r.Param] = r.Baseline.Median
			ratios[r.Param] = r.Ratio
			if !slices.Contains(conc, r.Param) {
				conc = append(conc, r.Param)
			}
		case "middleware":
			mw.value[r.Param] = r.Streamq.Median
		}
	}
	if len(conc) == 0 {
		return errors.New("no e2e results in " + in + ": run streamq-bench with -scenarios e2e -json")
	}
	slices.Sort(conc)
	all := []series{sq, bl}
	if len(mw.value) > 0 {
		all = append(all, mw)
	}
	title := "END-TO-END THROUGHPUT VS CONCURRENCY (NO-OP HANDLER)"
	sub := fmt.Sprintf("JOBS/S, MEDIAN OF %s RUNS, %s JOBS PER RUN, %s B PAYLOAD; %s, REDIS %s, %d CPUS SHARED WITH REDIS",
		rep.Settings["runs"], rep.Settings["jobs"], rep.Settings["payload"], rep.GoVersion, rep.RedisVersion, rep.NumCPU)
	img := drawChart(title, sub, conc, all, ratios)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const (
	width, height = 1100, 650
	left, right   = 110, 30
	top, bottom   = 110, 110
	scale         = 2 // font pixels per glyph pixel
)

func drawChart(title, sub string, conc []int, all []series, ratios map[int]float64) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)

	text(img, (width-textWidth(title, scale))/2, 16, title, black, scale)
	text(img, (width-textWidth(sub, 1))/2, 40, sub, greyLabel, 1)

	var maxV float64
	for _, s := range all {
		for _, v := range s.value {
			maxV = max(maxV, v)
		}
	}
	step := niceStep(maxV / 6)
	yMax := math.Ceil(maxV*1.12/step) * step
	plotW, plotH := width-left-right, height-top-bottom
	y := func(v float64) int { return top + plotH - int(v/yMax*float64(plotH)+0.5) }

	// Grid and y labels.
	for v := 0.0; v <= yMax+step/2; v += step {
		yy := y(v)
		hline(img, left, left+plotW, yy, grid)
		l := short(v)
		text(img, left-12-textWidth(l, scale), yy-7, l, axis, scale)
	}
	text(img, 14, top-36, "JOBS/S", axis, scale)
	vline(img, left, top, top+plotH, axis)
	hline(img, left, left+plotW, top+plotH, axis)

	// Bars.
	groupW := plotW / len(conc)
	barW := min(90, (groupW-40)/len(all))
	for gi, c := range conc {
		gx := left + gi*groupW + (groupW-barW*len(all))/2
		for si, s := range all {
			v, ok := s.value[c]
			if !ok {
				continue
			}
			x0 := gx + si*barW + 3
			x1 := gx + (si+1)*barW - 3
			draw.Draw(img, image.Rect(x0, y(v), x1, top+plotH), &image.Uniform{s.col}, image.Point{}, draw.Src)
			l := short(v)
			text(img, (x0+x1-textWidth(l, scale))/2, y(v)-20, l, black, scale)
		}
		cx := left + gi*groupW + groupW/2
		l := fmt.Sprintf("CONCURRENCY %d", c)
		text(img, cx-textWidth(l, scale)/2, top+plotH+12, l, black, scale)
		if r, ok := ratios[c]; ok {
			l := fmt.Sprintf("STREAMQ/BASELINE %.2fX", r)
			text(img, cx-textWidth(l, scale)/2, top+plotH+36, l, greyLabel, scale)
		}
	}

	// Legend.
	lx := left + 10
	ly := height - 36
	for _, s := range all {
		draw.Draw(img, image.Rect(lx, ly, lx+18, ly+14), &image.Uniform{s.col}, image.Point{}, draw.Src)
		name := strings.ToUpper(s.name)
		text(img, lx+26, ly, name, black, scale)
		lx += 26 + textWidth(name, scale) + 40
	}
	return img
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// short formats v as 950, 12.5K or 1.2M.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case v >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "K"
	}
	return fmt.Sprintf("%.0f", v)
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// Glyphs are 5 pixels wide and 7 high, drawn with one pixel of spacing.
const glyphW, glyphH = 5, 7

func textWidth(s string, sc int) int { return len(s) * (glyphW + 1) * sc }

// text draws s (upper-cased; unknown characters as blanks) with its top-left
// corner at (x, y), each glyph pixel sc×sc screen pixels.
func text(img *image.RGBA, x, y int, s string, c color.RGBA, sc int) {
	for i, r := range strings.ToUpper(s) {
		g, ok := font[r]
		if !ok {
			continue
		}
		ox := x + i*(glyphW+1)*sc
		for row, line := range g {
			for col, ch := range line {
				if ch != '#' {
					continue
				}
				draw.Draw(img, image.Rect(ox+col*sc, y+row*sc, ox+(col+1)*sc, y+(row+1)*sc),
					&image.Uniform{c}, image.Point{}, draw.Src)
			}
		}
	}
}

var font = map[rune][glyphH]string{
	'A': {" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
	'B': {"#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "},
	'C': {" ####", "#    ", "#    ", "#    ", "#    ", "#    ", " ####"},
	'D': {"#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "},
	'E': {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"},
	'F': {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "},
	'G': {" ####", "#    ", "#    ", "#  ##", "#   #", "#   #", " ####"},
	'H': {"#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
	'I': {" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'J': {"  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "},
	'K': {"#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"},
	'L': {"#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"},
	'M': {"#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"},
	'N': {"#   #", "##  #", "# # #", "#  ##", "#   #", "#   #", "#   #"},
	'O': {" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
	'P': {"#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "},
	'Q': {" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"},
	'R': {"#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"},
	'S': {" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "},
	'T': {"#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "},
	'U': {"#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
	'V': {"#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "},
	'W': {"#   #", "#   #", "#   #", "# # #", "# # #", "## ##", "#   #"},
	'X': {"#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"},
	'Y': {"#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "},
	'Z': {"#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"},
	'0': {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "},
	'1': {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'2': {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"},
	'3': {"#### ", "    #", "    #", " ### ", "    #", "    #", "#### "},
	'4': {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "},
	'5': {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "},
	'6': {" ### ", "#    ", "#    ", "#### ", "#   #", "#   #", " ### "},
	'7': {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "},
	'8': {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "},
	'9': {" ### ", "#   #", "#   #", " ####", "    #", "    #", " ### "},
	'.': {"     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "},
	',': {"     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "},
	':': {"     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "},
	';': {"     ", " ##  ", " ##  ", "     ", " ##  ", "  #  ", " #   "},
	'/': {"    #", "    #", "   # ", "  #  ", " #   ", "#    ", "#    "},
	'(': {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "},
	')': {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "},
	'-': {"     ", "     ", "     ", "#####", "     ", "     ", "     "},
	'+': {"     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "},
	'=': {"     ", "     ", "#####", "     ", "#####", "     ", "     "},
	'%': {"##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"},
	' ': {"     ", "     ", "     ", "     ", "     ", "     ", "     "},
}
