# cdf.gp — empirical CDFs (value, fraction) drawn as steps, one per series.
load tpldir.'/style.gp'
set key bottom right
set yrange [0:1.02]
PLOT = 'plot for [i=1:nseries] datafile index (i-1) using 1:2 with steps lw 2 title T[i]'
if (want_png) { @png_term; set output outbase.'.png'; @PLOT; unset output }
if (want_svg) { @svg_term; set output outbase.'.svg'; @PLOT; unset output }
