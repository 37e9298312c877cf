# lines.gp — y against x, one line per series; also the time-series kind
# (points = 0). The preamble written by `rehearse plot` sets: datafile (series
# as blocks for `index`), outbase, want_png, want_svg, nseries, T[] (titles),
# points, tpldir, and the title, labels and reference lines.
load tpldir.'/style.gp'
# Many series: the legend moves beside the plot, off the lines.
if (nseries > 5) { set key outside right top }
with_style = points ? 'linespoints lw 2' : 'lines lw 2'
PLOT = 'plot for [i=1:nseries] datafile index (i-1) using 1:2 with '.with_style.' title T[i]'
if (want_png) { @png_term; set output outbase.'.png'; @PLOT; unset output }
if (want_svg) { @svg_term; set output outbase.'.svg'; @PLOT; unset output }
