# scatter.gp — points of y against x per series; with diagonal = 1 a dashed
# y = x line shows where a prediction would equal the measurement.
load tpldir.'/style.gp'
set key bottom right
PLOT = 'plot for [i=1:nseries] datafile index (i-1) using 1:2 with points title T[i]'
if (diagonal) { PLOT = PLOT.', x with lines dt 2 lc rgb "#555555" title "y = x"' }
if (want_png) { @png_term; set output outbase.'.png'; @PLOT; unset output }
if (want_svg) { @svg_term; set output outbase.'.svg'; @PLOT; unset output }
