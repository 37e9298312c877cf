# bars.gp — grouped bars: one cluster per category (first column of the data
# file), one bar per series (T[] titles), values labelled above the bars.
load tpldir.'/style.gp'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set yrange [0:*]
set key top right
PLOT = 'plot for [i=1:nseries] datafile using (column(i+1)):xtic(1) title T[i]'
if (want_png) { @png_term; set output outbase.'.png'; @PLOT; unset output }
if (want_svg) { @svg_term; set output outbase.'.svg'; @PLOT; unset output }
