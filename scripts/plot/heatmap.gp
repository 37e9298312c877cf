# heatmap.gp — a value over a grid of two knobs. Rows of the data file are
# (x index, y index, value); the preamble sets the tic labels (and a log
# colour scale when the values span orders of magnitude). Each cell shows its
# value in a white box, so the best cell can be read, not guessed from a colour.
load tpldir.'/style.gp'
set grid noxtics noytics
set palette defined (0 "#f7fbff", 0.35 "#9ecae1", 0.7 "#3182bd", 1 "#08306b")
unset key
set view map
set style textbox opaque noborder fillcolor rgb "#ffffff"
cell(v) = abs(v) >= 1000 ? sprintf("%.0f", v) : sprintf("%.3g", v)
PLOT = 'plot datafile using 1:2:3 with image notitle, '.\
       'datafile using 1:2:(cell($3)) with labels boxed font ",10" notitle'
if (want_png) { @png_term; set output outbase.'.png'; @PLOT; unset output }
if (want_svg) { @svg_term; set output outbase.'.svg'; @PLOT; unset output }
