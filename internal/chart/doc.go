// Package chart holds what sluice's two SVG pictures of decisions share:
// the simulator's (sim.WriteSVG) and the dashboard's live rows. Both draw
// one row per series and one column per second, binned when the seconds
// are too many for the width, with the requests that passed in green and
// those refused stacked above them in hatched red under a ✕.
//
// The map:
//   - geometry and colours: [Width], [PlotLeft], [PlotWidth], [MinColumn],
//     [Green], [Red] and the rest, so the two pictures read alike;
//   - [Bins] decides how many seconds a column covers, and [TickStep] how
//     far apart the time axis's labels stand;
//   - [Printer] writes the markup and keeps the first error; its methods
//     draw the pieces both pictures use: the hatch pattern ([Printer.Hatch]),
//     the background, row rules and baselines, and one stacked column
//     ([Printer.Column]);
//   - [Text], [Attr] and [Capitalize] prepare strings for the markup.
//
// What is particular to each picture (its header, labels, scale and time
// axis) stays with it.
package chart
